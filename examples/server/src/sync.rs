//! State sync: every http bot's positions and working orders are read back from its broker, so the engine
//! decides CLOSE, MODIFY and CANCEL against what the account really holds.
//!
//! One task per (strategy, http bot) reads the account on start, every `sync_interval_secs` (default 30 s),
//! and whenever [`Syncer::poke`] is called (after a delivery). The broker's answer replaces the bot's state the
//! same way the admin `PUT …/state` does (memory, database, live snapshot): a fill at the broker turns a
//! working order into a position, a position closed by hand disappears. An admin override therefore lasts
//! until the next sync. A bot whose state could not be read for longer than `--stale-state-secs` gets one WARN
//! row in its strategy's Logs per episode.
//!
//! At brokers that publish crypto product increments, the same task reads them for each pair the strategy
//! names (not for `*`) on start and then every hour ([`INCREMENTS_EVERY`]), and puts them into the bot's
//! snapshot `increments` with the state, so sizes and limit prices are rounded to the product's steps. A
//! product that cannot be read keeps what was read before and is tried again at the next sync.
//!
//! Requests go out through the bot's [`crate::session::Session`], like its orders.

use crate::app::{now_ms, App};
use crate::bots::{Delivery, HttpBot};
use crate::client::Reply;
use crate::lease::Lease;
use crate::paper::{BotState, LegRec, OrderRec, PositionRec, StateSource};
use crate::store::LogEntry;
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use strategy_webhook::broker::{Broker, Request};
use strategy_webhook::model::{
    AssetClass, BrokerOrder, BrokerPosition, CryptoPair, Direction, InstrumentKey, Intent, LegAction, OrderSide,
    OrderStatus, PriceEffect,
};
use strategy_webhook::strategy::Bot;
use strategy_webhook::Level;
use strategy_webhook::Strategy;
use tokio::sync::Notify;

/// How often a bot's product increments are read again after a complete read.
pub const INCREMENTS_EVERY: Duration = Duration::from_secs(3600);

/// Default limit after which a bot's state counts as stale.
pub const STALE_AFTER: Duration = Duration::from_secs(120);

/// The sync tasks: one wake-up handle per (strategy, http bot).
#[derive(Default)]
pub struct Syncer {
    tasks: Mutex<HashMap<(String, String), Arc<Notify>>>,
    stale_after: OnceLock<Duration>,
}

impl Syncer {
    /// Asks for a sync of one bot now (after a delivery, say). Does nothing for a bot without a sync task.
    pub fn poke(&self, strategy: &str, bot: &str) {
        let tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = tasks.get(&(strategy.to_owned(), bot.to_owned())) {
            n.notify_one();
        }
    }

    /// Starts a task for every http bot of every loaded strategy, now and whenever strategies are (re)loaded
    /// (checked every second). `stale_after` is the `--stale-state-secs` limit.
    pub fn start(app: &Arc<App>, stale_after: Duration) -> tokio::task::JoinHandle<()> {
        let _ = app.sync.stale_after.set(stale_after);
        let app = Arc::clone(app);
        tokio::spawn(async move {
            loop {
                for s in app.engine.strategies() {
                    for bot in &s.bots {
                        if matches!(app.bots.delivery(&bot.id), Delivery::Http(_)) {
                            app.sync.ensure(&app, &s.id, &bot.id);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    }

    fn ensure(&self, app: &Arc<App>, strategy: &str, bot: &str) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let key = (strategy.to_owned(), bot.to_owned());
        if tasks.contains_key(&key) {
            return;
        }
        let notify = Arc::new(Notify::new());
        tasks.insert(key, Arc::clone(&notify));
        let stale = self.stale_after.get().copied().unwrap_or(STALE_AFTER);
        let task = run(Arc::clone(app), strategy.to_owned(), bot.to_owned(), notify, stale);
        let app = Arc::clone(app);
        let (s, b) = (strategy.to_owned(), bot.to_owned());
        // Forgotten, it is started again within a second.
        crate::app::spawn_recovering(strategy, bot, "sync", task, async move { app.sync.forget(&s, &b) });
    }

    fn forget(&self, strategy: &str, bot: &str) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.remove(&(strategy.to_owned(), bot.to_owned()));
    }
}

async fn run(app: Arc<App>, strategy: String, bot: String, notify: Arc<Notify>, stale: Duration) {
    let mut last_ok = now_ms();
    let mut warned = false;
    // Whether this bot's stopped session was told (it stays stopped until a restart).
    let mut stop_told = false;
    // Whether the broker's refusal of the bot's credentials was told (again after the next good read).
    let mut refusal_told = false;
    // Whether the refresh token's coming end was told (once a run).
    let mut expiry_told = false;
    let mut increments_read: Option<i64> = None;
    // A read again a moment after the one a delivery asked for: a market order is read back within milliseconds
    // of its acceptance, often before its fill shows, and the next read would otherwise be an interval away.
    let mut follow_up: Option<tokio::time::Instant> = None;
    // Whether this read was asked for (a delivery's poke), so a follow-up is due after it.
    let mut poked = false;
    loop {
        let interval = match app.bots.delivery(&bot) {
            Delivery::Http(h) if app.engine.strategy(&strategy).is_some() => h.sync_interval,
            _ => {
                app.sync.forget(&strategy, &bot);
                app.read_back.forget(&strategy, &bot);
                return;
            }
        };
        if !expiry_told {
            if let Delivery::Http(h) = app.bots.get(&bot) {
                if let Some(message) = h.session.refresh_token_ends_ms().and_then(|ends| expiry_warning(&bot, ends)) {
                    expiry_told = true;
                    tracing::warn!(strategy = %strategy, bot = %bot, "{message}");
                    app.writer.log(Some(bot_row(&strategy, Level::Warn, message.clone())), None).await;
                    crate::notify::expiring(&app, &strategy, &message).await;
                }
            }
        }
        // Every pair's increments are read again hourly; a pair with none yet (one a reload added to the running
        // strategy) at the next sync. Read only hourly, a new pair's orders kept the broker's fixed decimals for up
        // to an hour, and the broker refused every one off the product's step.
        let every = i64::try_from(INCREMENTS_EVERY.as_millis()).unwrap_or(i64::MAX);
        let all = increments_read.map_or(true, |t| now_ms().saturating_sub(t) >= every);
        match read_increments(&app, &strategy, &bot, all).await {
            Ok(()) if all => increments_read = Some(now_ms()),
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(strategy = %strategy, bot = %bot, error = %e, "reading product increments failed")
            }
        }
        // On a shared database one server reads a bot's account at a time (so a fill is noticed once): the
        // holder of its lease. While another holds it, that one reads and warns. A server whose session of the bot
        // is stopped (told below; it stays so until a restart) can read nothing: it leaves the lease to one whose
        // session is live, rather than hold it for a read bound to fail while that one waits to send the bot's rows.
        let stopped_here = stop_told && app.shared.is_some();
        let synced = if stopped_here {
            None
        } else {
            match app.leases.take(&strategy, &bot).await {
                Ok(Some(lease)) => {
                    let adopted = if lease.fresh {
                        crate::dispatch::adopt_state(&app, &strategy, &bot, &lease).await
                    } else {
                        Ok(())
                    };
                    // Taken before the reads: an entry the broker took before it is in what they find (`read_back.rs`).
                    let started = app.read_back.read_starting();
                    let read = match adopted {
                        Ok(()) => sync_now(&app, &strategy, &bot, &lease).await,
                        Err(e) => Err(format!("reading the bots' stored states failed: {e}")),
                    };
                    match read {
                        Ok(()) => app.read_back.read_done(&strategy, &bot, started),
                        Err(_) => app.read_back.read_failed(&strategy, &bot),
                    }
                    lease.give_back().await;
                    Some(read)
                }
                // Another server holds the bot's lease: it reads the account, and warns when it cannot.
                Ok(None) => None,
                Err(e) => Some(Err(format!("taking the bot's lease failed: {e}"))),
            }
        };
        match synced {
            None => last_ok = now_ms(),
            Some(Ok(())) => {
                last_ok = now_ms();
                if warned {
                    tracing::info!(strategy = %strategy, bot = %bot, "the bot's state is read from the broker again");
                }
                warned = false;
                refusal_told = false;
            }
            Some(Err(e)) => {
                tracing::warn!(strategy = %strategy, bot = %bot, error = %e, "reading the bot's state failed");
                // A session stopped by this read (a refresh token dead after its days, over a weekend with
                // nothing to send) is told at once, once: else the first word was the next order failing.
                if !stop_told {
                    if let Delivery::Http(h) = app.bots.get(&bot) {
                        if let Some(why) = h.session.stopped().await {
                            stop_told = true;
                            let message = format!("bot {bot} is stopped and sends nothing: {why}");
                            tracing::error!(strategy = %strategy, bot = %bot, "{message}");
                            app.writer.log(Some(bot_row(&strategy, Level::Error, message)), None).await;
                            crate::notify::stopped(&app, &strategy, &bot, &why).await;
                        }
                    }
                }
                // Keys revoked or regenerated, a JWT key deleted: a 401 (or 403) left after the session's renewal
                // and resend. Only OAuth sessions stop, so this went to the server's log alone, and the trader's
                // first word was the next order failing (an exit, perhaps). Told once, again after a good read.
                if !stop_told && !refusal_told && credentials_refused(&e) {
                    refusal_told = true;
                    let message = format!(
                        "bot {bot}: the broker refuses its credentials, so no order can be sent nor any state read \
                         until they are fixed in the bots file: {e}"
                    );
                    tracing::error!(strategy = %strategy, bot = %bot, "{message}");
                    app.writer.log(Some(bot_row(&strategy, Level::Error, message)), None).await;
                    crate::notify::refused(&app, &strategy, &bot, &e).await;
                }
            }
        }
        let age = Duration::from_millis(u64::try_from(now_ms().saturating_sub(last_ok)).unwrap_or(0));
        if age > stale && !warned {
            warned = true;
            let message = format!(
                "bot {bot}: its positions and working orders were last read from the broker {} s ago (limit {} \
                 s); decisions use the state as last known",
                age.as_secs(),
                stale.as_secs()
            );
            tracing::warn!(strategy = %strategy, bot = %bot, "{message}");
            app.writer.log(Some(bot_row(&strategy, Level::Warn, message)), None).await;
        }
        // Wake up in time to notice staleness even when the interval is longer.
        let mut wait = interval.min(stale.max(Duration::from_secs(1)));
        let now = tokio::time::Instant::now();
        follow_up = next_follow_up(std::mem::take(&mut poked), follow_up, now);
        if let Some(at) = follow_up {
            wait = wait.min(at.saturating_duration_since(now));
        }
        if tokio::time::timeout(wait, notify.notified()).await.is_ok() {
            poked = true;
        }
    }
}

/// When the read after the one just done is due for a fill that shows late: [`FOLLOW_UP`] after the end of a read a
/// delivery asked for (`poked`), still `pending` when that is later than `now`, else none (the read just done was the
/// follow-up). Counted from the poke, a read slower than [`FOLLOW_UP`] (a broker slow to answer) ran past it and the
/// follow-up was dropped: a market entry filling after that read stayed unseen for an interval, and a CLOSE meanwhile
/// was refused as having nothing to close.
fn next_follow_up(
    poked: bool,
    pending: Option<tokio::time::Instant>,
    now: tokio::time::Instant,
) -> Option<tokio::time::Instant> {
    if poked {
        return Some(now + FOLLOW_UP);
    }
    pending.filter(|at| *at > now)
}

/// How long after a delivery's read its account is read once more (a fill that showed late).
const FOLLOW_UP: Duration = Duration::from_secs(2);

/// How long before a refresh token's end the trader is told to log in again.
const EXPIRY_WARNING: Duration = Duration::from_secs(24 * 3600);

/// The warning for a refresh token that ends at `ends_ms`, when that is within [`EXPIRY_WARNING`]: a dead one
/// stops the bot, and its exits with it, until the trader logs in again.
fn expiry_warning(bot: &str, ends_ms: i64) -> Option<String> {
    let left_ms = ends_ms.saturating_sub(now_ms());
    if left_ms > i64::try_from(EXPIRY_WARNING.as_millis()).unwrap_or(i64::MAX) {
        return None;
    }
    let hours = left_ms.max(0) as f64 / 3_600_000.0;
    Some(format!(
        "bot {bot}: its refresh token ends in about {hours:.1} h (the lifetime configured for its login, counted \
         from when this server first saw it): log in to the broker again and configure the new refresh token \
         before then, or the bot stops sending orders, exits included"
    ))
}

/// A log row of the strategy about one of its bots, outside any alert.
fn bot_row(strategy: &str, level: Level, message: String) -> LogEntry {
    LogEntry {
        ts_ms: now_ms(),
        strategy: strategy.to_owned(),
        decision: "processed",
        http_status: 200,
        alerts: "[]".into(),
        records: vec![(level, message)],
    }
}

/// Reads one bot's positions and working orders from its broker and makes them the bot's state.
pub async fn sync_now(app: &App, strategy: &str, bot: &str, lease: &Lease) -> Result<(), String> {
    let s = app.engine.strategy(strategy).ok_or_else(|| format!("no strategy {strategy}"))?;
    let cfg = s.bots.iter().find(|b| &*b.id == bot).ok_or_else(|| format!("strategy {strategy} has no bot {bot}"))?;
    let Delivery::Http(http) = app.bots.delivery(bot) else {
        return Err(format!("bot {bot} is not delivered over http"));
    };
    let broker = cfg.broker.broker();
    // What the reads describe is the account named when they are sent: the strategy may be reloaded with another
    // account while they are out, and what they return must not then pass for the new account's.
    let source = StateSource { target: Some(http.target().to_owned()), ..StateSource::of(cfg) };
    // A delivery that records an order while the account is being read would be undone by a state read
    // before the broker had it: when the state changed under the reads, they are made again.
    // A state of these reads written into the database without becoming the bot's (a delivery changed it
    // meanwhile): the database is written again even when the next reads find the state unchanged.
    let mut written = false;
    for _ in 0..3 {
        let old = app.bot_state(strategy, bot);
        // The working orders before the positions: an order that fills between the two reads is then in both
        // (a CANCEL or MODIFY of it is refused by the broker, harmlessly) rather than in neither, which would
        // read a filled entry as nothing to close and a filled exit as a position still to close.
        let orders = read_orders(&http, broker, &cfg.account_id).await?;
        // Orders the state holds that the list does not show working are read back one by one, before the
        // positions too: a broker lists a new order late (the read right after a delivery comes within
        // milliseconds), and dropped, a CANCEL found no working order and a CLOSE did not cancel the exit first,
        // until the next sync. Read after the positions, an exit that filled in between was in neither: dropped
        // as filled while the shares it sold were still held, and a CLOSE sold them a second time.
        let listed = |id: &str| orders.iter().any(|b| b.order_id == id && !b.status.is_final());
        let gone: Vec<OrderRec> = old.working_orders.iter().filter(|o| !listed(&o.id)).cloned().collect();
        let (kept, ended) = read_gone(&http, broker, &cfg.account_id, gone).await;
        let mut positions = read_positions(&http, broker, &cfg.account_id).await?;
        let mut orders = orders;
        as_strategy_names(&s, cfg, &mut positions, &mut orders);
        let mut new = to_state(&s, &positions, &orders);
        new.next_id = old.next_id;
        // The notes of orders this bot pulled lately, for a re-size's new order still to come, and (marked with
        // the order that stood in, whatever became of it since) for a later re-size's cancel of a pulled order.
        let now = now_ms();
        new.pulled =
            old.pulled.iter().filter(|p| now.saturating_sub(p.at_ms) < crate::paper::PULLED_KEPT_MS).cloned().collect();
        new.source = Some(source.clone());
        keep_recorded_sides(&s, &old, &mut new);
        // What the list says, and what the orders missing from it were read back as: a replacement refused at a
        // broker that lists working orders only is not listed, but read back final, and the old order it was to
        // replace works on (the replace given up); taken for one not listed yet, the old order was left out of the
        // state for a minute, a CANCEL finding nothing and a CLOSE not cancelling it first.
        let read_back: Vec<BrokerOrder> = orders.iter().cloned().chain(ended.iter().map(|(_, b)| b.clone())).collect();
        drop_replaced(&old, &mut new, &read_back, now);
        for k in kept {
            if !new.working_orders.iter().any(|n| n.id == k.id) && !new.replaced.iter().any(|r| r.old == k.id) {
                new.working_orders.push(k);
            }
        }
        if app.bot_state(strategy, bot) != old {
            continue;
        }
        // The account was edited while it was read: the poke of the reload reads the new one.
        if !app.state_fits(strategy, bot, &new) {
            return Ok(());
        }
        if new == old && !written {
            // The broker says what the state says: it is as fresh as these reads.
            crate::metrics::bot_synced(strategy, bot, now_ms());
            return Ok(());
        }
        // Reads can take seconds: a server paused or cut off past the lease's time meanwhile may find another
        // server holding the bot, and its state (with an order it placed since these reads) newer than theirs.
        if !lease.valid() {
            tracing::warn!(strategy, bot, "the bot's lease ran out while its account was read; the reads are dropped");
            return Ok(());
        }
        // Only over a state that is committed: one a delivery set whose commit has not landed would be written
        // into the database after this one, under it in memory, and every later sync finding the broker as
        // memory has it would leave the database behind for good. Deliveries commit in milliseconds.
        let Some(settled) = app.settled_state(strategy, bot, Duration::from_secs(5)).await else {
            return Err("the bot's deliveries are still being recorded; read again at the next sync".into());
        };
        if settled != old {
            continue;
        }
        let Some(taken) = store_synced(app, strategy, bot, lease, &old, new).await? else {
            tracing::warn!(
                strategy,
                bot,
                "another server took the bot over while its account was read; the reads are dropped"
            );
            return Ok(());
        };
        if !taken {
            written = true;
            continue;
        }
        app.refresh_bots(strategy);
        crate::metrics::bot_synced(strategy, bot, now_ms());
        tracing::info!(strategy, bot, "bot state synced from the broker");
        report_fills(app, strategy, bot, &ended).await;
        return Ok(());
    }
    Err("the bot's state kept changing while the account was read; read again at the next sync".into())
}

/// Stores a synced state and makes it the bot's, unless the bot's state changed from `old` while it was stored (a
/// delivery recorded an order the reads did not see): then the state in memory stays the delivery's, whose own
/// commit comes after this one, and the caller reads the account again. Says whether the state was taken, or
/// `None` when it was not stored because the bot's lease is another server's now (see [`Lease::store_state`]).
async fn store_synced(
    app: &App,
    strategy: &str,
    bot: &str,
    lease: &Lease,
    old: &BotState,
    new: BotState,
) -> Result<Option<bool>, String> {
    let text = serde_json::to_string(&new).map_err(|e| e.to_string())?;
    if !lease.store_state(&app.writer, text).await.map_err(|e| format!("storing the state failed: {e}"))? {
        return Ok(None);
    }
    Ok(Some(app.replace_bot_state(strategy, bot, old, new)))
}

/// The most pages of a paged list (working orders, positions) one sync reads.
const ORDER_PAGES: usize = 50;

/// The account's working orders, every page of them: a list cut at its first page would drop the orders past it
/// from the state, and an alert acting on one of them would not find it. An order met on two pages (the list
/// moved while it was read) is kept once.
async fn read_orders(http: &HttpBot, broker: &dyn Broker, account_id: &str) -> Result<Vec<BrokerOrder>, String> {
    let mut req = broker.open_orders_request(account_id, now_ms()).map_err(|e| e.to_string())?;
    let mut orders: Vec<BrokerOrder> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    for _ in 0..ORDER_PAGES {
        let body = read(http, &req, "orders").await?;
        let (page, next) = broker.parse_orders_page(&req, &body).map_err(|e| e.to_string())?;
        orders.extend(page.into_iter().filter(|o| o.order_id.is_empty() || seen.insert(o.order_id.clone())));
        match next {
            Some(next) => req = next,
            None => return Ok(orders),
        }
    }
    Err(format!("the broker's order list goes on past {ORDER_PAGES} pages"))
}

/// The account's positions, every page of them (a broker that pages them, as Coinbase its wallets).
async fn read_positions(http: &HttpBot, broker: &dyn Broker, account_id: &str) -> Result<Vec<BrokerPosition>, String> {
    let mut req = broker.positions_request(account_id).map_err(|e| e.to_string())?;
    let mut positions = Vec::new();
    for _ in 0..ORDER_PAGES {
        let body = read(http, &req, "positions").await?;
        let (page, next) = broker.parse_positions_page(&req, &body).map_err(|e| e.to_string())?;
        positions.extend(page);
        match next {
            Some(next) => req = next,
            None => return Ok(positions),
        }
    }
    Err(format!("the broker's positions go on past {ORDER_PAGES} pages"))
}

/// Working orders the state holds that the broker's working list lacks, each read back by its id: those still
/// working (listed late) and those whose read failed for a while (429, 5xx, no answer) are kept, to be read
/// again at the next sync; those the broker says are done are returned with what it said. An order without an
/// id, one the broker does not know (404) or cannot be read back at all, or one whose answer is not understood,
/// is let go as before, so that an order cancelled by hand does not stay tracked for good.
async fn read_gone(
    http: &HttpBot,
    broker: &dyn Broker,
    account_id: &str,
    gone: Vec<OrderRec>,
) -> (Vec<OrderRec>, Vec<(OrderRec, BrokerOrder)>) {
    let (mut kept, mut ended) = (Vec::new(), Vec::new());
    for o in gone {
        let Some(req) =
            Some(&o.id).filter(|id| !id.is_empty()).and_then(|id| broker.order_request(account_id, id).ok())
        else {
            continue;
        };
        match get(http, &req.path).await {
            Ok((200..=299, body)) => match broker.parse_order(&body) {
                Ok(read) if read.status.is_final() || filled_in_full(&read) => ended.push((o, read)),
                Ok(read) => kept.push(as_read_back(o, &read)),
                Err(_) => {}
            },
            Ok((429 | 500.., _)) | Err(_) => kept.push(o),
            Ok(_) => {}
        }
    }
    (kept, ended)
}

/// Working order `o` as its read-back `read` (still working) has it, as the list would: what remains, and what
/// filled, counted in the units of the legs the state records for it ([`crate::paper::recounted`]). A broker that
/// keeps the id lists an order placed as one unit of 2:2 so after its re-price, which the state records as sent (two
/// units of 1:1): the read's 1 beside the recorded 1:1 legs halved the order, and the next MODIFY sent that.
///
/// A read that states no count of the order (zero: see [`BrokerOrder::quantity`]) leaves it as recorded: its fills
/// beside the recorded size, with nothing to measure what is left against, made a change stating the whole size
/// (left plus filled) grow the order by what had filled.
fn as_read_back(mut o: OrderRec, read: &BrokerOrder) -> OrderRec {
    if read.quantity <= strategy_webhook::decimal::Decimal::ZERO {
        return o;
    }
    let count = |q| crate::paper::recounted(q, read.legs.iter().map(|l| l.ratio), o.legs.iter().map(|l| l.ratio));
    let (Some(quantity), Some(filled)) = (count(read.quantity), count(read.filled_quantity)) else { return o };
    if let Some(left) = quantity.checked_sub(filled).filter(|q| *q > strategy_webhook::decimal::Decimal::ZERO) {
        o.quantity = left;
        // Stated now, the count is its size, whatever it was recorded without: a size not known beside a count
        // is a state the strategy's checks refuse.
        (o.size_known, o.notional) = (true, None);
    }
    o.filled = filled.max(strategy_webhook::decimal::Decimal::ZERO);
    o
}

/// Working orders that left the broker's working list and read back as done: a fill is reported (a
/// notification, where the strategy has a receiver). A cancelled or expired one is not a fill.
async fn report_fills(app: &App, strategy: &str, bot: &str, ended: &[(OrderRec, BrokerOrder)]) {
    for (o, read_back) in ended {
        if read_back.status == OrderStatus::Filled {
            let side = if o.intent == "exit" { "exit" } else { "entry" };
            let price = o.price.map(|p| format!(" @ {p}")).unwrap_or_default();
            let what = format!(
                "bot {bot}: {side} order {} filled at the broker: {} {} {}{price}",
                o.id, o.direction, read_back.filled_quantity, o.instrument
            );
            crate::notify::filled(app, strategy, &what).await;
        }
    }
}

/// Reads the product increments of every pair the strategy names (its allowed instruments, as the bot's
/// `symbols` map them for the broker) at a broker that publishes them, and puts them into the bot's snapshot
/// under the strategy's name for each pair. Nothing is asked of a broker that publishes none. Pairs that
/// could not be read keep what was read before; the error names them. Not `all`, only the pairs the bot has none
/// read for yet are read: nothing is asked of the broker when every pair has its increments.
pub async fn read_increments(app: &App, strategy: &str, bot: &str, all: bool) -> Result<(), String> {
    let s = app.engine.strategy(strategy).ok_or_else(|| format!("no strategy {strategy}"))?;
    let cfg = s.bots.iter().find(|b| &*b.id == bot).ok_or_else(|| format!("strategy {strategy} has no bot {bot}"))?;
    if s.asset_class != AssetClass::Crypto {
        return Ok(());
    }
    let Delivery::Http(http) = app.bots.delivery(bot) else {
        return Err(format!("bot {bot} is not delivered over http"));
    };
    let broker = cfg.broker.broker();
    let mut read_now = app.bot_increments(strategy, bot);
    let before = read_now.clone();
    let mut failed = Vec::new();
    let wanted = |i: &&String| i.trim() != "*" && (all || !before.contains_key(*i));
    for instrument in s.allowed_instruments.iter().filter(wanted) {
        // The product the orders go to: the bot's map read as the orders read it, any spelling of the pair.
        let at_broker = cfg.symbol_for(instrument.trim(), AssetClass::Crypto).unwrap_or(instrument.as_str());
        let Some(pair) = CryptoPair::parse(at_broker) else { continue };
        let Some(req) = broker.product_request(&pair) else { return Ok(()) };
        let answer = match read(&http, &req, "the product").await {
            Ok(body) => broker.parse_product(&body).map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        match answer {
            Ok(inc) => {
                read_now.insert(instrument.clone(), inc);
            }
            Err(e) => failed.push(format!("{instrument}: {e}")),
        }
    }
    if read_now != before {
        app.set_bot_increments(strategy, bot, read_now);
        app.refresh_bots(strategy);
        tracing::info!(strategy, bot, "product increments read from the broker");
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// Whether a sync's failure is the broker refusing the bot's credentials: a read answered 401 or 403 (after the
/// session's renewal and resend), as [`read`] words it.
fn credentials_refused(e: &str) -> bool {
    e.contains(": HTTP 401:") || e.contains(": HTTP 403:")
}

async fn read(bot: &HttpBot, req: &Request, what: &str) -> Result<Bytes, String> {
    let (status, body) = get(bot, &req.path).await?;
    if (200..300).contains(&status) {
        Ok(body)
    } else {
        let text: String = String::from_utf8_lossy(&body).chars().take(200).collect();
        Err(format!("reading {what}: HTTP {status}: {text}"))
    }
}

/// The broker's positions and working orders as the strategy's bot state: only what the strategy trades
/// (its asset class, and its allowed instruments when it lists them), named as the strategy names them.
/// Whether an order has filled its whole quantity, whatever its status says.
fn filled_in_full(o: &BrokerOrder) -> bool {
    o.quantity > strategy_webhook::decimal::Decimal::ZERO && o.filled_quantity >= o.quantity
}

pub fn to_state(s: &Strategy, positions: &[BrokerPosition], orders: &[BrokerOrder]) -> BotState {
    // As the strategy reads its list (`*` allows any): read as instruments, a `*` matched none, and every
    // position and order of a strategy trading any instrument was dropped at each sync (its exits then refused
    // as nothing to close).
    let wanted = |instrument: &str| s.allowed_instruments.is_empty() || s.allows_instrument(instrument);
    let mut state = BotState::default();
    let mut options: Vec<&BrokerPosition> = Vec::new();
    for p in positions.iter().filter(|p| p.asset_class == s.asset_class) {
        // A crypto position is its coin, whichever pair bought it: held in every pair of that coin the strategy
        // trades (as the core's `BrokerPosition::holds_pair` reads it), and in the pair the broker names it by when
        // the strategy trades that. Alpaca lists BTC bought with USDT as `BTCUSD`: kept as BTC/USD only, it was no
        // position of a BTC/USDT strategy (its CLOSE found nothing to close, its entry was sized as if flat); and
        // filed under one of a strategy's two pairs of the coin, the other pair's CLOSE found nothing. Spot coins
        // cannot be sold twice: a second pair's close after the first is refused by the broker.
        let coin_pairs = |coin: &str| -> Vec<String> {
            s.allowed_instruments
                .iter()
                .filter_map(|i| CryptoPair::split(i))
                .filter(|(base, _)| base.eq_ignore_ascii_case(coin))
                .map(|(base, quote)| format!("{}/{}", base.to_uppercase(), quote.to_uppercase()))
                .fold(Vec::new(), |mut v, name| {
                    if !v.contains(&name) {
                        v.push(name);
                    }
                    v
                })
        };
        let instruments: Vec<String> = match (&p.asset_class, &p.pair) {
            (AssetClass::Crypto, Some(pair)) => {
                let named = pair_text(pair);
                let mut all = coin_pairs(&pair.base);
                if !all.contains(&named) {
                    all.insert(0, named);
                }
                all
            }
            // A bare balance: the strategy's pairs with that coin as their base (cash in the quote is no position).
            (AssetClass::Crypto, None) => {
                let all = coin_pairs(&p.instrument);
                if !all.is_empty() {
                    all
                } else if s.allows_instrument("*") {
                    match any_pair_balance(&p.instrument, orders) {
                        Some(name) => vec![name],
                        None => continue,
                    }
                } else {
                    continue;
                }
            }
            (AssetClass::Option, _) => {
                options.push(p);
                continue;
            }
            _ => vec![p.instrument.clone()],
        };
        for instrument in instruments.into_iter().filter(|i| wanted(i)) {
            state.positions.push(PositionRec {
                instrument,
                direction: dir(p.direction).into(),
                quantity: p.quantity,
                avg_price: p.average_price,
                legs: Vec::new(),
            });
        }
    }
    // Option contracts on one underlying are one position: the structure as its legs, its size the smallest
    // leg's contracts (each leg's ratio is its contracts over that).
    let mut by_underlying: Vec<(InstrumentKey, Vec<&BrokerPosition>)> = Vec::new();
    for p in options {
        let key = InstrumentKey::new(&p.instrument, AssetClass::Option);
        match by_underlying.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(p),
            None => by_underlying.push((key, vec![p])),
        }
    }
    for (key, legs) in by_underlying {
        if !wanted(key.as_str()) {
            continue;
        }
        // The largest count of whole units every leg divides into: with the smallest leg's count instead, long 2 and
        // short 3 read as 2 units of 1:1, and a CLOSE bought back 2 of the 3 short calls, leaving one naked.
        let units = whole_units(legs.iter().map(|p| p.quantity))
            .unwrap_or_else(|| legs.iter().map(|p| p.quantity).min().unwrap_or_default());
        if units.is_zero() {
            continue;
        }
        let direction = if legs.iter().any(|p| p.direction == Direction::Long) { "long" } else { "short" };
        state.positions.push(PositionRec {
            instrument: key.as_str().to_owned(),
            direction: direction.into(),
            quantity: units,
            avg_price: None,
            legs: legs
                .iter()
                .map(|p| LegRec {
                    symbol: p.instrument.clone(),
                    action: match p.direction {
                        Direction::Long => LegAction::BuyToOpen,
                        Direction::Short => LegAction::SellToOpen,
                    }
                    .as_str()
                    .to_owned(),
                    // Checked: both are the broker's numbers, and a quotient out of range would panic the sync.
                    ratio: p
                        .quantity
                        .checked_div(units)
                        .and_then(|r| r.trunc().to_string().parse().ok())
                        .unwrap_or(1)
                        .max(1),
                })
                .collect(),
        });
    }
    for o in orders.iter().filter(|o| matches!(o.status, OrderStatus::Working | OrderStatus::Unknown)) {
        if o.asset_class != s.asset_class {
            continue;
        }
        let instrument = match (&o.asset_class, &o.pair) {
            (AssetClass::Crypto, Some(pair)) => pair_text(pair),
            (AssetClass::Option, _) => InstrumentKey::new(&o.instrument, AssetClass::Option).as_str().to_owned(),
            _ => o.instrument.clone(),
        };
        // A sell of a coin the strategy trades, on a pair it does not (BTC-USDC beside a BTC/USD strategy), sells
        // the same coins as the strategy's own exits: the broker holds them for it. Left out, a CLOSE sold the whole
        // balance beside it, which the broker refused, and the position stayed open. It is kept as an exit of the
        // coin, under its own pair, which the core pulls before a CLOSE of any pair of the coin. So is a buy paid in
        // such a coin on a pair the strategy does not trade (ETH-BTC beside a BTC/USD strategy: the broker holds the
        // BTC it spends), under the pair the other way round ([`paid_in_the_coin`]). On a pair the strategy trades
        // (ETH/BTC beside BTC/USD, or `*`) it is that pair's entry, which the core's CLOSE of the coin pulls first all
        // the same (a buy on a pair quoted in the coin). A buy of the coin on another pair spends another currency
        // and sells nothing the strategy holds: it stays out.
        let sells_coin = o.asset_class == AssetClass::Crypto
            && o.side == Some(OrderSide::Sell)
            && o.pair.as_ref().is_some_and(|p| trades_coin(s, &p.base));
        let paid_in_coin = match o.pair.as_ref() {
            Some(p)
                if o.asset_class == AssetClass::Crypto && o.side == Some(OrderSide::Buy) && !wanted(&instrument) =>
            {
                trades_coin(s, &p.quote).then(|| paid_in_the_coin(o, p))
            }
            _ => None,
        };
        if let Some(paid) = paid_in_coin {
            if !filled_in_full(o) {
                state.working_orders.push(paid);
            }
            continue;
        }
        if !wanted(&instrument) && !sells_coin {
            continue;
        }
        let intent = match wanted(&instrument) {
            true => o
                .intent
                .or_else(|| spread_intent(o))
                .or_else(|| guess_intent(&state, &instrument, s.asset_class, o.side)),
            false => Some(Intent::CloseLong),
        };
        let Some(intent) = intent else { continue };
        // Filled in full under a status the broker still calls working (Alpaca's `calculated`, settling): nothing of
        // it can fill any more. Kept at its whole size, the bot held the shares and an entry for as many again, and a
        // CLOSE cancelled it first, which the broker refused, holding the close back.
        if filled_in_full(o) {
            continue;
        }
        let remaining =
            o.quantity.checked_sub(o.filled_quantity).filter(|q| *q > strategy_webhook::decimal::Decimal::ZERO);
        // No count (an order a trader sized in dollars, whose shares are known only as it fills; a size the broker
        // left out) is stored as a working order whose size is not known, never as one of 0 (which the strategy's
        // checks refuse, and a MODIFY sized from). Left out, a trader's dollar sell beside the long it sells from was
        // not cancelled before a CLOSE sold the whole position beside it (refused at the broker, or short if both
        // filled), and a dollar buy was not pulled by a CANCEL. The core pulls it on both, and changes it on no MODIFY.
        let quantity = remaining.unwrap_or(o.quantity);
        let size_known = quantity > strategy_webhook::decimal::Decimal::ZERO;
        state.working_orders.push(OrderRec {
            id: o.order_id.clone(),
            instrument,
            direction: dir(intent.direction()).into(),
            intent: if intent.is_open() { "entry" } else { "exit" }.into(),
            // A kind this library does not place (a stop, a stop-limit, a bracket) is the snapshot's `other`: left
            // out, a trader's stop-limit sell was not cancelled before a CLOSE sold the coins or shares it held, and
            // the broker refused the close. The core pulls it before a CLOSE and restates it on no MODIFY.
            order_type: o.order_type.map_or("other", |t| t.as_str()).to_owned(),
            price: snapshot_price(o),
            quantity: if size_known { quantity } else { strategy_webhook::decimal::Decimal::ZERO },
            size_known,
            notional: o.notional.filter(|_| !size_known),
            filled: o.filled_quantity.max(strategy_webhook::decimal::Decimal::ZERO),
            // A time in force the core has no word for (Tastytrade's GTC Ext, Alpaca's `opg`, Tradier's `pre`) is
            // the snapshot's `other`: stored as `day`, a MODIFY re-sent a GTC Ext exit as a day order, which expired
            // that night and left the position without it.
            duration: o.duration.map_or("other", |d| d.as_str()).to_owned(),
            state: "open".into(),
            legs: o
                .legs
                .iter()
                .filter_map(|l| {
                    Some(LegRec { symbol: l.instrument.clone(), action: l.action?.as_str().to_owned(), ratio: l.ratio })
                })
                .collect(),
        });
    }
    if s.asset_class == AssetClass::Option {
        file_under_held_side(&mut state, |_| false);
    }
    state
}

/// Files each working option exit not `known` (by its id) under the side of the held position whose legs hold every
/// contract it closes, held the way it closes them (a buy to close of a contract sold to open, a sell to close of one
/// bought), when the positions holding them are all of one side. Read from its legs alone, a trader's buy-stop on a
/// vertical's short leg (a lone `buy_to_close`) closes a short: with the spread held as the strategy's long side (a
/// bull put credit spread), it was filed under the short side, and the CLOSE of the long side bought back the put
/// beside the stop, which a CLOSE cancels first only on its own side. Held by no position (or by both sides), the
/// side read from the order stands.
fn file_under_held_side(state: &mut BotState, known: impl Fn(&str) -> bool) {
    let positions = &state.positions;
    for o in state.working_orders.iter_mut().filter(|o| o.intent == "exit" && !o.legs.is_empty() && !known(&o.id)) {
        // Each contract with whether the position holds it bought (closed by a sell), or `None` for an opening leg.
        let closing: Option<Vec<(&str, bool)>> = o
            .legs
            .iter()
            .map(|l| match l.action.as_str() {
                "sell_to_close" => Some((l.symbol.as_str(), true)),
                "buy_to_close" => Some((l.symbol.as_str(), false)),
                _ => None,
            })
            .collect();
        let Some(closing) = closing else { continue };
        let key = InstrumentKey::new(&o.instrument, AssetClass::Option);
        let holds = |p: &&PositionRec| {
            InstrumentKey::new(&p.instrument, AssetClass::Option) == key
                && closing
                    .iter()
                    .all(|(c, bought)| p.legs.iter().any(|h| h.symbol == *c && h.action.starts_with("buy") == *bought))
        };
        let mut sides = positions.iter().filter(holds).map(|p| p.direction.as_str());
        let Some(first) = sides.next() else { continue };
        if sides.all(|d| d == first) {
            o.direction = first.to_owned();
        }
    }
}

/// A working buy on `pair` paid in a coin the strategy trades (its quote: ETH-BTC beside a BTC/USD strategy), as
/// the bot's state holds it: an exit of the coin it spends, filed under the pair the other way round (`BTC/ETH`, a
/// sell of BTC for ETH) so that the core's CLOSE of any pair of the coin cancels it first, of kind `other` so that
/// no MODIFY restates it (it is the trader's, and not in that pair's terms). Its size is the coin it holds back: what
/// is left to buy times its limit price; with no limit price (a market buy, or one sized in money) the size is not
/// known, which the core pulls all the same and never sizes from. No price: the broker's is the other pair's.
fn paid_in_the_coin(o: &BrokerOrder, pair: &CryptoPair) -> OrderRec {
    use strategy_webhook::decimal::Decimal;
    let left = o.quantity.checked_sub(o.filled_quantity).filter(|q| *q > Decimal::ZERO);
    let held = left.zip(o.limit_price.filter(|p| *p > Decimal::ZERO)).and_then(|(q, p)| q.checked_mul(p));
    let held = held.filter(|h| *h > Decimal::ZERO);
    OrderRec {
        id: o.order_id.clone(),
        instrument: pair_text(&CryptoPair { base: pair.quote.clone(), quote: pair.base.clone() }),
        direction: dir(Direction::Long).into(),
        intent: "exit".into(),
        order_type: "other".into(),
        price: None,
        quantity: held.unwrap_or(Decimal::ZERO),
        size_known: held.is_some(),
        notional: None,
        filled: Decimal::ZERO,
        duration: o.duration.map_or("other", |d| d.as_str()).to_owned(),
        state: "open".into(),
        legs: Vec::new(),
    }
}

/// Whether `coin` is the base of a crypto pair the strategy lists, or the strategy allows any (`*`, or no list, as
/// [`to_state`] reads it): a position in it is the strategy's, whichever pair holds it.
fn trades_coin(s: &Strategy, coin: &str) -> bool {
    s.allowed_instruments.is_empty()
        || s.allowed_instruments.iter().any(|i| i.trim() == "*")
        || s.allowed_instruments
            .iter()
            .filter_map(|i| CryptoPair::split(i))
            .any(|(base, _)| base.eq_ignore_ascii_case(coin))
}

/// An instrument two strategies' bots on one account may both take for their own ([`to_state`]), in the
/// strategies' spelling or the bots' `symbols`, or `None` when they cannot: `*` when either allows any. A crypto
/// pair is its coins, since a position is its coin whichever pair bought it, and a coin one pair is quoted in is
/// spent by its entries: `BTC/USD` meets `BTC/USDT` and `ETH/BTC`, not `ETH/USD` (two pairs quoted in one
/// currency share buying power, as any two bots on one account do, not a position). An option is its
/// underlying, and meets the stock of that name: assignment turns contracts into shares. Of several, the first
/// in name order, so that an error names the same one every time.
pub fn shared_instrument(a: (&Strategy, &Bot), b: (&Strategy, &Bot)) -> Option<String> {
    let (Some((a_held, a_spent)), Some((b_held, b_spent))) = (reach(a.0, a.1), reach(b.0, b.1)) else {
        return Some("*".to_owned());
    };
    let held_by_other =
        |held: &std::collections::BTreeSet<String>,
         other: (&std::collections::BTreeSet<String>, &std::collections::BTreeSet<String>)| {
            held.iter().find(|i| other.0.contains(*i) || other.1.contains(*i)).cloned()
        };
    held_by_other(&a_held, (&b_held, &b_spent)).or_else(|| held_by_other(&b_held, (&a_held, &a_spent)))
}

/// What a strategy's bot holds at its account (instruments, coins) and what it spends (the coins its pairs are
/// quoted in); `None` when it allows any instrument.
fn reach(s: &Strategy, bot: &Bot) -> Option<(std::collections::BTreeSet<String>, std::collections::BTreeSet<String>)> {
    let (mut held, mut spent) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    for allowed in &s.allowed_instruments {
        if allowed.trim() == "*" {
            return None;
        }
        for name in std::iter::once(allowed.as_str()).chain(bot.symbol_for(allowed, s.asset_class)) {
            let name = strategy_webhook::alert::normalize_instrument(name);
            match CryptoPair::split(&name).filter(|_| s.asset_class == AssetClass::Crypto) {
                Some((base, quote)) => {
                    held.insert(base.to_uppercase());
                    spent.insert(quote.to_uppercase());
                }
                None => {
                    held.insert(InstrumentKey::new(&name, s.asset_class).as_str().to_owned());
                }
            }
        }
    }
    Some((held, spent))
}

/// A spread's intent from its legs: opening legs make an entry, closing legs an exit; a debit opens (or a
/// credit closes) a long structure, and without a price effect the first leg's side tells.
/// A working order's price as the snapshot reads it: a spread's is its signed net, negative for a credit (as an
/// alert's is, and as a MODIFY that sends no price re-prices it); the broker gives a magnitude and says which.
/// Stored as the magnitude, a resting credit spread was re-sent as a debit at that price (marketable) by a
/// MODIFY of its size alone. A spread whose broker does not say gets no price, so such a MODIFY is refused for
/// want of one rather than sent as a guess.
fn snapshot_price(o: &BrokerOrder) -> Option<strategy_webhook::decimal::Decimal> {
    let p = o.limit_price?;
    if o.asset_class != AssetClass::Option || o.legs.len() < 2 {
        return Some(p);
    }
    match o.price_effect? {
        PriceEffect::Credit => Some(-p),
        PriceEffect::Debit => Some(p),
    }
}

fn spread_intent(o: &BrokerOrder) -> Option<Intent> {
    let actions: Vec<LegAction> = o.legs.iter().filter_map(|l| l.action).collect();
    let first = *actions.first()?;
    let open = actions.iter().all(|a| a.is_open());
    if !open && actions.iter().any(|a| a.is_open()) {
        return None;
    }
    let long = match o.price_effect {
        Some(PriceEffect::Debit) => open,
        Some(PriceEffect::Credit) => !open,
        None => first.is_buy() == open,
    };
    Some(Intent::new(open, if long { Direction::Long } else { Direction::Short }))
}

/// A sell against a long position closes it; otherwise it opens a short (and a buy the other way round).
fn guess_intent(state: &BotState, instrument: &str, class: AssetClass, side: Option<OrderSide>) -> Option<Intent> {
    let key = InstrumentKey::new(instrument, class);
    let held =
        |d: &str| state.positions.iter().any(|p| p.direction == d && InstrumentKey::new(&p.instrument, class) == key);
    Some(match side? {
        OrderSide::Sell if held("long") => Intent::new(false, Direction::Long),
        OrderSide::Sell => Intent::new(true, Direction::Short),
        OrderSide::Buy if held("short") => Intent::new(false, Direction::Short),
        OrderSide::Buy => Intent::new(true, Direction::Long),
    })
}

/// The greatest common divisor of whole contract counts (each above zero), or `None` when one is not whole.
fn whole_units(
    counts: impl Iterator<Item = strategy_webhook::decimal::Decimal>,
) -> Option<strategy_webhook::decimal::Decimal> {
    let mut g: u64 = 0;
    for c in counts {
        let n: u64 = c.normalize().to_string().parse().ok().filter(|n| *n > 0)?;
        let (mut a, mut b) = (g, n);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        g = a;
    }
    (g > 0).then(|| strategy_webhook::decimal::Decimal::from(g))
}

/// Leaves out of the read's working orders those the bot replaced (`BotState::replaced`). Right after a cancel
/// and replace, the broker lists the old order as working (pending replace) beside the new one the delivery
/// recorded; read back as a second working order, it held up what came next: a CLOSE cancelled it first and the
/// broker refused that cancel (pending a replace, or replaced by then), so the close was not sent; a MODIFY was
/// refused as ambiguous.
///
/// A note is kept while the replacement stands: listed as working, or not listed yet within [`REPLACE_SETTLES_MS`]
/// of the replace, the old order done or not: a cancel decided against the old order before the replace was
/// delivered is sent to the replacement by it (`dispatch::reaimed`). Forgotten once the old order was done, the
/// sync that followed the replace's delivery dropped it before that cancel went out, which the broker refused
/// while the replacement worked on. A replace the broker gave up (the old order filled in part first, and the new
/// one was refused or cancelled) leaves the old order working: it is read back as such, or a CLOSE would not
/// cancel it first.
fn drop_replaced(old: &BotState, new: &mut BotState, orders: &[BrokerOrder], now_ms: i64) {
    let status = |id: &str| orders.iter().find(|o| o.order_id == id).map(|o| o.status);
    let replacing = |r: &crate::paper::Replaced| match status(&r.new) {
        Some(s) => !s.is_final(),
        None => now_ms.saturating_sub(r.at_ms) < REPLACE_SETTLES_MS,
    };
    new.replaced = old.replaced.iter().filter(|r| replacing(r)).cloned().collect();
    new.working_orders.retain(|o| !new.replaced.iter().any(|r| r.old == o.id));
}

/// How long after a replace its new order may be missing from the broker's list before the old one, still
/// listed as working, is taken to stand.
const REPLACE_SETTLES_MS: i64 = 60_000;

/// Sides the bot's state recorded for option orders and positions, kept over what a read guesses. A broker says
/// an option order buys or sells, and a premium is paid or received, but not which of the strategy's sides it is:
/// a strategy whose short side buys puts had its working entry read back as long (a CANCEL SHORT then found none,
/// and the entry filled), and the filled puts as a long position (its reversal's CLOSE skipped). A working order
/// keeps the side recorded under its id. An option position takes the side that recorded each of its contracts
/// (in positions or working entries), when one side alone did: a side grown by a second structure is read back as
/// one position of both structures' legs, which no single record holds, and taken for long it was left open by its
/// CLOSE SHORT. Failing that, the side of the position, or of the working entry, that held the same contracts.
fn keep_recorded_sides(s: &Strategy, old: &BotState, new: &mut BotState) {
    // Each contract with whether it is bought or sold: the same contracts held the other way (a spread reversed
    // onto itself) are another position, whose side is not the recorded one.
    fn contracts(legs: &[LegRec]) -> Vec<(&str, bool)> {
        let mut c: Vec<(&str, bool)> = legs.iter().map(|l| (l.symbol.as_str(), l.action.starts_with("buy"))).collect();
        c.sort_unstable();
        c
    }
    for n in new.working_orders.iter_mut().filter(|n| !n.legs.is_empty() && !n.id.is_empty()) {
        if let Some(o) = old.working_orders.iter().find(|o| o.id == n.id) {
            n.direction.clone_from(&o.direction);
            n.intent.clone_from(&o.intent);
        }
    }
    // Every structure the bot recorded: its positions and its working entries, each with its side.
    let records: Vec<(&str, Vec<(&str, bool)>)> = old
        .positions
        .iter()
        .filter(|o| !o.legs.is_empty())
        .map(|o| (o.direction.as_str(), contracts(&o.legs)))
        .chain(
            old.working_orders
                .iter()
                .filter(|o| o.intent == "entry" && !o.legs.is_empty())
                .map(|o| (o.direction.as_str(), contracts(&o.legs))),
        )
        .collect();
    // The one side that recorded every contract held, if one did: a contract no record holds, or one held by
    // records of both sides, leaves the side to the exact match below.
    let one_side = |held: &[(&str, bool)]| -> Option<String> {
        let mut side: Option<&str> = None;
        for c in held {
            let mut sides = records.iter().filter(|(_, r)| r.contains(c)).map(|(d, _)| *d);
            let first = sides.next()?;
            if sides.any(|d| d != first) || side.is_some_and(|s| s != first) {
                return None;
            }
            side = Some(first);
        }
        side.map(str::to_owned)
    };
    for n in new.positions.iter_mut().filter(|n| !n.legs.is_empty()) {
        let held = contracts(&n.legs);
        if let Some(d) = one_side(&held) {
            n.direction = d;
            continue;
        }
        let recorded = old
            .positions
            .iter()
            .filter(|o| !o.legs.is_empty())
            .find(|o| contracts(&o.legs) == held)
            .map(|o| &o.direction)
            .or_else(|| {
                old.working_orders
                    .iter()
                    .filter(|o| o.intent == "entry" && !o.legs.is_empty())
                    .find(|o| contracts(&o.legs) == held)
                    .map(|o| &o.direction)
            });
        if let Some(d) = recorded.map(String::as_str).or_else(|| side_by_rules(s, &n.legs)) {
            n.direction = d.to_owned();
        }
    }
    // The exits not recorded, filed again under their positions' sides as now kept (a credit spread read as long
    // by `to_state` may be the strategy's short side).
    let recorded = |id: &str| !id.is_empty() && old.working_orders.iter().any(|o| o.id == id);
    file_under_held_side(new, recorded);
}

/// The side whose leg rules (internal selection) build exactly these legs, call or put and bought or sold, when one
/// side alone does: a position a market order opened has no recorded side to keep.
fn side_by_rules(s: &Strategy, legs: &[LegRec]) -> Option<&'static str> {
    let rules = &s.options.as_ref()?.legs;
    let mut held: Vec<(bool, bool)> = legs
        .iter()
        .map(|l| {
            let call = strategy_webhook::model::OptionContract::parse_occ(&l.symbol)
                .map(|c| c.side == strategy_webhook::model::OptionSide::Call);
            (call.unwrap_or(false), l.action.starts_with("buy"))
        })
        .collect();
    held.sort_unstable();
    let shape = |rules: &[strategy_webhook::strategy::LegRule]| {
        let mut r: Vec<(bool, bool)> =
            rules.iter().map(|r| (r.side == strategy_webhook::model::OptionSide::Call, r.action.is_buy())).collect();
        r.sort_unstable();
        r
    };
    match (shape(&rules.long) == held, shape(&rules.short) == held) {
        (true, false) => Some("long"),
        (false, true) => Some("short"),
        _ => None,
    }
}

/// The name the strategy gives an instrument the bot's broker names `broker_name`: the bot's `symbols` map read
/// backwards (`{"BRK.B": "BRK/B"}`: `BRK/B` is `BRK.B`), compared as instruments, so `BTC-USD` finds `BTC/USD`.
/// `None` when the map does not name it (it is then the strategy's name too). Of two keys for one broker name
/// (`BRK.B` and `BRKB`), the one the strategy allows.
pub fn strategy_name<'a>(s: &Strategy, cfg: &'a Bot, broker_name: &str) -> Option<&'a str> {
    let key = InstrumentKey::new(broker_name.trim(), s.asset_class);
    let mut names =
        cfg.symbols.iter().filter(|(_, v)| InstrumentKey::new(v.trim(), s.asset_class) == key).map(|(k, _)| k.trim());
    let first = names.next()?;
    Some(std::iter::once(first).chain(names).find(|k| s.allows_instrument(k)).unwrap_or(first))
}

/// Positions and working orders as read from the broker, renamed to the strategy's names where the bot's
/// `symbols` maps them: kept under the broker's name, a mapped instrument's position was no position of the
/// strategy (`wanted` dropped it, or a CLOSE in the alerts' name found nothing to close). A bare coin balance is
/// renamed when a mapped pair has that coin as its base.
fn as_strategy_names(s: &Strategy, cfg: &Bot, positions: &mut [BrokerPosition], orders: &mut [BrokerOrder]) {
    if cfg.symbols.is_empty() {
        return;
    }
    let rename = |instrument: &mut String, pair: &mut Option<CryptoPair>| {
        let broker_name = pair.as_ref().map_or_else(|| instrument.clone(), pair_text);
        if let Some(name) = strategy_name(s, cfg, &broker_name) {
            if pair.is_some() {
                *pair = CryptoPair::parse(name).or(pair.take());
            }
            *instrument = name.to_owned();
        }
    };
    for p in positions.iter_mut() {
        // An option position is named by its contract, and keyed by its underlying later: renaming the contract
        // would put a bare symbol where its legs need an OCC one.
        if p.asset_class == AssetClass::Option {
            continue;
        }
        if p.asset_class == AssetClass::Crypto && p.pair.is_none() {
            let coin = p.instrument.trim().to_owned();
            // Of several keys mapped to pairs of this coin, the one the strategy allows.
            let keys: Vec<&str> = cfg
                .symbols
                .iter()
                .filter(|(_, v)| CryptoPair::split(v.trim()).is_some_and(|(base, _)| base.eq_ignore_ascii_case(&coin)))
                .map(|(k, _)| k.trim())
                .collect();
            let mapped = keys.iter().find(|k| s.allows_instrument(k)).or(keys.first());
            if let Some(pair) = mapped.and_then(|k| CryptoPair::parse(k)) {
                p.instrument = pair_text(&pair);
                p.pair = Some(pair);
            }
            continue;
        }
        rename(&mut p.instrument, &mut p.pair);
    }
    for o in orders.iter_mut().filter(|o| o.asset_class != AssetClass::Option) {
        rename(&mut o.instrument, &mut o.pair);
    }
}

/// A bare coin balance of a strategy that trades any pair (`*`), named as a pair: the pair of a working order of
/// that coin, else the coin against USD. Cash (USD, the stablecoins, EUR, GBP) is what pairs are quoted in, not a
/// position. Left out, every balance of such a strategy vanished at each sync and its exits were refused.
fn any_pair_balance(coin: &str, orders: &[BrokerOrder]) -> Option<String> {
    const CASH: [&str; 6] = ["USD", "USDC", "USDT", "EUR", "GBP", "DAI"];
    if CASH.iter().any(|c| c.eq_ignore_ascii_case(coin)) {
        return None;
    }
    let traded = orders.iter().filter_map(|o| o.pair.as_ref()).find(|p| p.base.eq_ignore_ascii_case(coin));
    Some(traded.map_or_else(|| format!("{}/USD", coin.to_uppercase()), pair_text))
}

/// A pair as the bot's state names it: `BASE/QUOTE`.
pub fn pair_text(pair: &CryptoPair) -> String {
    format!("{}/{}", pair.base, pair.quote)
}

fn dir(d: Direction) -> &'static str {
    match d {
        Direction::Long => "long",
        Direction::Short => "short",
    }
}

/// A parsed `http(s)://host:port/path` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `https`.
    pub tls: bool,
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Path (with its query), `/` when none.
    pub path: String,
}

impl Url {
    /// Reads an absolute http or https URL (no credentials in it).
    pub fn parse(url: &str) -> Result<Url, String> {
        // Checked first, on the whole URL, and before any message quotes it: a password may hold `/`, `?` or
        // `#`, which would end the authority early and let the password through into a start-up error.
        if url.contains('@') {
            return Err("the URL must not hold credentials (user:password@)".into());
        }
        let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(format!("{url:?} must start with https:// or http://"));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && !p.contains(']') => {
                (h.to_owned(), p.parse::<u16>().map_err(|_| format!("{url:?} has a bad port"))?)
            }
            _ => (authority.to_owned(), if tls { 443 } else { 80 }),
        };
        if host.is_empty() {
            return Err(format!("{url:?} has no host"));
        }
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        Ok(Url { tls, host, port, path: path.to_owned() })
    }

    /// The Host header's value (the port only when it is not the scheme's).
    pub fn authority(&self) -> String {
        if (self.tls && self.port == 443) || (!self.tls && self.port == 80) {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Sync reads in flight at once to one broker (its host and port), across all its bots. Each bot's task reads on
/// its own and they all start together, so with one connection per read in flight, many bots at one broker held
/// as many connections (kept open after, idle), and under a full listener the process ran out of descriptors.
/// The slots are each broker's own: shared by all brokers, the reads of one that stopped answering (each holding
/// a slot for its bot's timeout) held them all, and another broker's bot had its account read back a minute or
/// more after its order. As many as a pool keeps idle per host ([`crate::client::IDLE_PER_HOST`]), so the
/// connections a burst of reads opens are kept for the next. Orders do not wait for these (their own bounds are
/// the dispatcher's [`crate::dispatch::CONCURRENCY`] in all and [`crate::dispatch::PER_HOST`] per broker).
pub const SYNC_READS_PER_HOST: usize = 8;

/// A broker's read slots.
type Slots = Arc<tokio::sync::Semaphore>;

/// Each broker's [`SYNC_READS_PER_HOST`] slots, by host and port. The bots are read once at start, so this holds
/// one entry per broker they name.
static READS: OnceLock<Mutex<HashMap<(String, u16), Slots>>> = OnceLock::new();

/// The read slots of `bot`'s broker.
fn read_slots(bot: &HttpBot) -> Slots {
    let mut by_host = READS.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner());
    let slots = by_host
        .entry((bot.host.clone(), bot.port))
        .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(SYNC_READS_PER_HOST)));
    Arc::clone(slots)
}

/// The most sync reads these bots may have in flight at once: [`SYNC_READS_PER_HOST`] for each broker (host
/// and port) they name. A token renewal a read needs is made within its slot.
pub fn reads_in_flight(bots: &crate::bots::Bots) -> u64 {
    let brokers: HashSet<(&str, u16)> = bots.http().map(|b| (b.host.as_str(), b.port)).collect();
    (brokers.len() * SYNC_READS_PER_HOST) as u64
}

/// A GET of `path` (after the bot's base path) with the bot's auth headers, on the brokers' pooled client; a
/// 401 renews the session's token and is tried once more. Waits for one of its broker's
/// [`SYNC_READS_PER_HOST`] first (the bot's timeout counts from the request, not from the wait).
pub async fn get(bot: &HttpBot, path: &str) -> Result<(u16, Bytes), String> {
    let slots = read_slots(bot);
    // Never closed, so the permit is always granted.
    let _read = slots.acquire().await;
    match crate::client::send_authorized(bot, "GET", path, None, Vec::new(), &crate::client::Hold::FREE).await {
        Reply::Answered { status, body, .. } => Ok((status, body)),
        Reply::NotSent(e) | Reply::Unknown(e) | Reply::Stopped(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strategy_webhook::decimal::Decimal;
    use strategy_webhook::model::{BrokerLeg, OptionContract, OrderType, RequestKind};

    fn strategy(edit: impl FnOnce(&mut serde_json::Value)) -> Strategy {
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        edit(&mut v);
        Strategy::from_json(v.to_string().as_bytes()).unwrap()
    }

    const SPX_TOKEN: &str = "d4080c65a7ec92cae69c9e5e26b0bdc2bf10f18df4eee5217ef0d1eb5ec3874c";

    /// Two strategies' bots on one account: what both may take for their own at a sync, in any spelling, through
    /// the bots' `symbols`, a crypto pair by its coins.
    #[test]
    fn strategies_on_one_account_overlap_where_a_sync_could_give_both_one_position() {
        // At the first broker that takes the strategy (crypto or options at one that trades them).
        let with = |class: &str, allowed: serde_json::Value, symbols: serde_json::Value| {
            let v = serde_json::json!({
                "id": "s", "token_hash": SPX_TOKEN, "status": "active", "asset_class": class,
                "order_type": "limit", "duration": "gtc", "allowed_instruments": allowed,
                "options": {"selection": "internal", "expiration": {"min_days": 0, "max_days": 7},
                            "legs": {"long": [{"side": "call", "action": "buy_to_open", "strike": {"atm_offset": 0}}]}},
            });
            strategy_webhook::broker::BrokerId::ALL
                .into_iter()
                .find_map(|b| {
                    let mut v = v.clone();
                    if class != "option" {
                        v.as_object_mut().unwrap().remove("options");
                    }
                    v["bots"] = serde_json::json!([{"id": "t", "broker": b.as_str(), "account_id": "A1",
                                                    "sizing": {"fixed_quantity": "1"}, "symbols": symbols}]);
                    Strategy::from_json(v.to_string().as_bytes()).ok()
                })
                .unwrap_or_else(|| panic!("no broker takes a {class} strategy"))
        };
        let shared = |a: &Strategy, b: &Strategy| shared_instrument((a, &a.bots[0]), (b, &b.bots[0]));
        let none = serde_json::json!({});
        let equity = |allowed: serde_json::Value| with("equity", allowed, none.clone());
        let crypto = |allowed: serde_json::Value| with("crypto", allowed, none.clone());
        let (aapl, msft) = (equity(serde_json::json!(["AAPL"])), equity(serde_json::json!(["MSFT"])));
        assert_eq!(shared(&aapl, &msft), None);
        assert_eq!(shared(&aapl, &equity(serde_json::json!(["nasdaq:aapl "]))).as_deref(), Some("AAPL"));
        assert_eq!(shared(&msft, &equity(serde_json::json!(["*"]))).as_deref(), Some("*"));
        assert_eq!(shared(&with("option", serde_json::json!(["AAPL"]), none.clone()), &aapl).as_deref(), Some("AAPL"));
        // The other bot sends `BRKB` as `BRK.B`, which this strategy trades under that name.
        let mapped = with("equity", serde_json::json!(["BRKB"]), serde_json::json!({ "brkb": "BRK.B" }));
        assert_eq!(shared(&equity(serde_json::json!(["BRK.B"])), &mapped).as_deref(), Some("BRK.B"));
        let btc_usd = crypto(serde_json::json!(["BTC/USD"]));
        assert_eq!(shared(&btc_usd, &crypto(serde_json::json!(["BTC-USDT"]))).as_deref(), Some("BTC"));
        assert_eq!(shared(&crypto(serde_json::json!(["ETH/BTC"])), &btc_usd).as_deref(), Some("BTC"));
        assert_eq!(shared(&crypto(serde_json::json!(["ETH/USD"])), &btc_usd), None, "one quote is buying power");
    }

    /// Each broker has its own read slots, counted in the descriptor reserve: one that stops answering fills only
    /// its own, and another broker's bots still read.
    #[tokio::test]
    async fn each_broker_has_its_own_read_slots_and_the_reserve_counts_them() {
        let file = serde_json::json!({
            "a": { "delivery": "http", "base_url": "http://127.0.0.2:8080" },
            "a2": { "delivery": "http", "base_url": "http://127.0.0.2:8080/v2" },
            "a-tls": { "delivery": "http", "base_url": "https://127.0.0.2" },
            "b": { "delivery": "http", "base_url": "http://127.0.0.3:8080" },
        });
        let bots = crate::bots::Bots::from_json(file.to_string().as_bytes(), std::path::Path::new("/x")).unwrap();
        assert_eq!(reads_in_flight(&bots), 3 * SYNC_READS_PER_HOST as u64);
        let http = |id: &str| match bots.get(id) {
            Delivery::Http(h) => h.clone(),
            Delivery::Paper => unreachable!(),
        };
        let hung = read_slots(&http("a"));
        let _held = Arc::clone(&hung).acquire_many_owned(SYNC_READS_PER_HOST as u32).await.unwrap();
        assert!(read_slots(&http("a2")).try_acquire().is_err(), "a broker's bots share its slots");
        assert!(read_slots(&http("b")).try_acquire().is_ok(), "another broker's reads do not wait");
    }

    /// A password holding `/` in a token URL ended the authority early, slipped past the credentials check and was
    /// printed whole in the start-up error ("… has a bad port"): a secret in the journal. No error quotes it now.
    #[test]
    fn a_url_with_credentials_is_refused_without_repeating_them() {
        for url in [
            "https://app:S3CR/ET@api.example/v1/oauth/token",
            "https://app:S3CR?ET@api.example/v1/oauth/token",
            "https://app:S3CRET@api.example/v1/oauth/token",
            "app:S3CR/ET@api.example/v1/oauth/token",
        ] {
            let e = Url::parse(url).expect_err(url);
            assert!(e.contains("must not hold credentials") && !e.contains("S3CR"), "{url}: {e}");
        }
        let u = Url::parse("https://api.example:8443/v1/oauth/token").unwrap();
        assert_eq!((u.tls, u.authority(), u.path.as_str()), (true, "api.example:8443".to_owned(), "/v1/oauth/token"));
    }

    /// An SPX option strategy, with one bot on the first broker that takes index options.
    fn spx_strategy() -> Strategy {
        strategy_webhook::broker::BrokerId::ALL
            .into_iter()
            .find_map(spx_strategy_at)
            .expect("some broker takes index options")
    }

    /// An SPX option strategy with one bot at broker `b`, if the snapshot takes it there.
    fn spx_strategy_at(b: strategy_webhook::broker::BrokerId) -> Option<Strategy> {
        let v = serde_json::json!({
            "id": "spx", "token_hash": SPX_TOKEN,
            "status": "active", "asset_class": "option", "order_type": "limit", "allowed_instruments": ["SPX"],
            "options": {"selection": "internal", "expiration": {"min_days": 0, "max_days": 7},
                        "legs": {"long": [{"side": "call", "action": "buy_to_open", "strike": {"atm_offset": 0}}]}},
            "bots": [{"id": "t", "broker": b.as_str(), "account_id": "A1", "sizing": {"fixed_quantity": "1"}}],
        });
        Strategy::from_json(v.to_string().as_bytes()).ok()
    }

    /// A SPY option strategy whose `side` ("long" or "short") is a credit spread: the at-the-money `right` ("put" or
    /// "call") sold to open, the one `wing` strikes away bought to open; one bot at the first broker that takes SPY
    /// options.
    fn spy_spread_strategy(side: &str, (right, wing): (&str, i32)) -> Strategy {
        strategy_webhook::broker::BrokerId::ALL
            .into_iter()
            .find_map(|b| {
                let v = serde_json::json!({
                    "id": "spy", "token_hash": SPX_TOKEN,
                    "status": "active", "asset_class": "option", "order_type": "limit", "allowed_instruments": ["SPY"],
                    "options": {"selection": "internal", "expiration": {"min_days": 0, "max_days": 7},
                                "legs": {side: [{"side": right, "action": "sell_to_open", "strike": {"atm_offset": 0}},
                                                {"side": right, "action": "buy_to_open", "strike": {"atm_offset": wing}}]}},
                    "bots": [{"id": "t", "broker": b.as_str(), "account_id": "A1", "sizing": {"fixed_quantity": "1"}}],
                });
                Strategy::from_json(v.to_string().as_bytes()).ok()
            })
            .expect("some broker takes SPY options")
    }

    /// A bullish strategy whose long side is a bull put credit spread (short the 500 put, long the 490 put), held,
    /// with the trader's buy-stop on the short leg (`buy_to_close`, a stop: the usual stop-loss of a credit spread),
    /// at the first broker that takes SPY options. A CLOSE of the spread buys back the 500 put: the stop, which buys
    /// back the same put, must be cancelled first. Read from its leg alone it closes a short, and filed under the
    /// short side, the CLOSE of the long side left it working beside the close.
    #[test]
    fn a_buy_stop_on_a_verticals_short_leg_is_cancelled_before_its_close() {
        const SHORT_PUT: &str = "SPY260320P00500000";
        const LONG_PUT: &str = "SPY260320P00490000";
        let s = spy_spread_strategy("long", ("put", -2));
        // The trader's stop, as a broker lists it: a buy to close of the short put, of a kind this library does not
        // place.
        let mut stop = order("901", SHORT_PUT, AssetClass::Option, OrderSide::Buy, "1");
        stop.intent = Some(Intent::new(false, Direction::Short));
        stop.order_type = None;
        stop.limit_price = None;
        stop.duration = Some(strategy_webhook::model::Duration::Gtc);
        stop.legs = vec![spread_leg(SHORT_PUT, LegAction::BuyToClose)];
        let positions =
            [position(SHORT_PUT, AssetClass::Option, false, "1"), position(LONG_PUT, AssetClass::Option, true, "1")];
        let mut st = to_state(&s, &positions, &[stop]);
        // As the sync does: the side the strategy's rules give the spread (its long side is the bull put spread).
        keep_recorded_sides(&s, &BotState::default(), &mut st);
        let filed: Vec<(String, String, String)> =
            st.working_orders.iter().map(|o| (o.id.clone(), o.intent.clone(), o.direction.clone())).collect();
        let held: Vec<(String, String)> =
            st.positions.iter().map(|p| (p.instrument.clone(), p.direction.clone())).collect();
        let (positions, working) = st.to_core().unwrap();
        let mut live = s.clone();
        live.bots[0].positions = positions;
        live.bots[0].working_orders = working;
        let e = strategy_webhook::Engine::new();
        e.upsert(live).unwrap();
        let body = r#"{"ticker":"SPY","action":"close","price":"1.00"}"#;
        let out = e.deliver(SPX_TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), 1_772_600_000_000);
        let kinds: Vec<String> = out.orders.iter().map(|o| format!("{:?}", o.kind)).collect();
        assert!(
            out.orders.iter().any(|o| o.kind == RequestKind::Cancel && o.order_id.as_deref() == Some("901")),
            "positions {held:?}, stop filed as {filed:?}; the CLOSE sent {kinds:?} and left the buy-stop 901 on the \
             short put working: {:?}",
            out.logs
        );
    }

    /// The other way round: a bearish strategy whose short side is a bear call credit spread (short the 500 call,
    /// long the 510 call), held, with the trader's buy-stop on the short call. The spread is read as long from the
    /// broker, and kept as the short side by the strategy's rules: the stop is filed under that side with it.
    #[test]
    fn a_buy_stop_on_a_bear_call_spreads_short_leg_is_filed_under_the_short_side() {
        const SHORT_CALL: &str = "SPY260320C00500000";
        const LONG_CALL: &str = "SPY260320C00510000";
        let s = spy_spread_strategy("short", ("call", 2));
        let mut stop = order("902", SHORT_CALL, AssetClass::Option, OrderSide::Buy, "1");
        stop.intent = Some(Intent::new(false, Direction::Short));
        stop.order_type = None;
        stop.limit_price = None;
        stop.legs = vec![spread_leg(SHORT_CALL, LegAction::BuyToClose)];
        let positions =
            [position(SHORT_CALL, AssetClass::Option, false, "1"), position(LONG_CALL, AssetClass::Option, true, "1")];
        let mut st = to_state(&s, &positions, &[stop]);
        keep_recorded_sides(&s, &BotState::default(), &mut st);
        assert_eq!(st.positions[0].direction, "short");
        assert_eq!((st.working_orders[0].intent.as_str(), st.working_orders[0].direction.as_str()), ("exit", "short"));
    }

    /// One leg of a spread order as a broker reads it back.
    fn spread_leg(symbol: &str, action: LegAction) -> BrokerLeg {
        BrokerLeg {
            instrument: symbol.into(),
            contract: OptionContract::parse_occ(symbol),
            action: Some(action),
            ratio: 1,
            quantity: d("1"),
        }
    }

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    fn position(instrument: &str, class: AssetClass, long: bool, qty: &str) -> BrokerPosition {
        BrokerPosition {
            instrument: instrument.into(),
            asset_class: class,
            contract: OptionContract::parse_occ(instrument),
            pair: CryptoPair::parse(instrument).filter(|_| instrument.contains(['/', '-'])),
            direction: if long { Direction::Long } else { Direction::Short },
            quantity: d(qty),
            average_price: None,
        }
    }

    fn order(id: &str, instrument: &str, class: AssetClass, side: OrderSide, qty: &str) -> BrokerOrder {
        BrokerOrder {
            extended_session: false,
            order_id: id.into(),
            client_order_id: None,
            instrument: instrument.into(),
            asset_class: class,
            pair: CryptoPair::parse(instrument).filter(|_| class == AssetClass::Crypto),
            side: Some(side),
            intent: None,
            order_type: Some(OrderType::Limit),
            limit_price: Some(d("185")),
            price_effect: None,
            duration: Some(strategy_webhook::model::Duration::Day),
            quantity: d(qty),
            notional: None,
            filled_quantity: Decimal::ZERO,
            status: OrderStatus::Working,
            broker_status: "open".into(),
            legs: Vec::new(),
            created_at: None,
            created_ms: None,
            replaced_by: None,
            reason: None,
        }
    }

    /// Right after a cancel and replace of an exit, the broker lists the old order as working (pending replace)
    /// beside the new one the delivery recorded. Read back, the bot held two exits: a CLOSE cancelled the old
    /// one first, the broker refused that cancel, and the close was held back. The replaced order stays out
    /// until the broker lists it as done, and is then forgotten.
    /// An SPX strategy whose short side buys puts (so a bought put read from a broker looks like a long entry).
    fn puts_for_short() -> Strategy {
        let mut s = spx_strategy();
        s.options.as_mut().unwrap().legs.short = vec![serde_json::from_value(
            serde_json::json!({"side": "put", "action": "buy_to_open", "strike": {"atm_offset": 0}}),
        )
        .unwrap()];
        s
    }

    /// A working order `id` buying one put to open, as a broker lists it.
    fn listed_put(id: &str) -> BrokerOrder {
        const PUT: &str = "SPXW260320P05800000";
        let mut o = order(id, PUT, AssetClass::Option, OrderSide::Buy, "1");
        o.price_effect = Some(PriceEffect::Debit);
        o.legs = vec![spread_leg(PUT, LegAction::BuyToOpen)];
        o
    }

    /// The OPEN SHORT a row sent: one put bought to open.
    fn sent_open_short() -> strategy_webhook::model::Order {
        serde_json::from_str(
            r#"{"asset_class":"option","symbol":"SPX","intent":"open_short","quantity":1,"order_type":"limit",
                "limit_price":2.10,"price_effect":"debit","duration":"day","client_order_id":"swh-x",
                "legs":[{"symbol":"SPXW260320P05800000","expiration":"2026-03-20","side":"put",
                         "strike":5800,"action":"buy_to_open","ratio":1}]}"#,
        )
        .unwrap()
    }

    /// How many requests a CANCEL SHORT gets from the engine against `st`'s working orders.
    fn cancels_short(s: &Strategy, st: &BotState) -> usize {
        let e = strategy_webhook::Engine::new();
        let mut live = s.clone();
        live.bots[0].working_orders = st.to_core().unwrap().1;
        e.upsert(live).unwrap();
        let body = br#"{"ticker":"SPX","action":"cancel","direction":"short"}"#;
        e.deliver(SPX_TOKEN.as_bytes(), body, Some("application/json"), 1_774_000_000_000).orders.len()
    }

    /// An options strategy whose short side buys puts: an OPEN SHORT that buys a put was listed by a sync
    /// before the delivery's answer came back (a restart mid-send, an uncertain send looked up). The sync read the
    /// bought put as a long entry, the answer kept the listed copy, and every later sync kept that side by id: a
    /// CANCEL SHORT found nothing, and the order went on working. The delivered order's side wins now.
    #[test]
    fn an_entry_listed_before_its_answer_keeps_the_delivered_side() {
        let s = puts_for_short();
        let mut st = to_state(&s, &[], &[listed_put("X")]);
        keep_recorded_sides(&s, &BotState::default(), &mut st);
        assert_eq!(st.working_orders[0].direction, "long", "the sync's guess from the listing");
        st.rest("X".into(), &sent_open_short());
        assert_eq!(st.working_orders.len(), 1, "held once");
        let mut next = to_state(&s, &[], &[listed_put("X")]);
        keep_recorded_sides(&s, &st, &mut next);
        assert_eq!(next.working_orders[0].direction, "short", "the row sent an OPEN SHORT");
        assert_eq!(cancels_short(&s, &next), 1);
    }

    /// A working vertical listed 2:2 (one unit of two contracts a leg, as a broker lists an order placed so), re-priced
    /// by a MODIFY, one unit of it filled: the core sends what remains as two units of 1:1. The state's `replaced`
    /// took the new quantity (2) and kept the old 2:2 legs, four verticals recorded where two work, and the next
    /// price MODIFY, decided on that state, sent four; an id kept kept its fill in the old units (one of 1:1, where
    /// two verticals filled). At every broker that takes index options, the id kept or a new one given.
    #[test]
    fn a_replace_of_an_order_listed_with_a_common_factor_records_the_contracts_it_sent() {
        let mut tried = 0;
        for b in strategy_webhook::broker::BrokerId::ALL {
            if !b.broker().offers(AssetClass::Option) || !b.broker().offers_index_options() {
                continue;
            }
            let s = spx_strategy_at(b).expect("an index option broker takes the snapshot");
            tried += 1;
            let leg = |symbol: &str, action: &str| LegRec { symbol: symbol.into(), action: action.into(), ratio: 2 };
            let mut st = BotState {
                working_orders: vec![OrderRec {
                    id: "1004055540391".into(),
                    instrument: "SPX".into(),
                    direction: "long".into(),
                    intent: "entry".into(),
                    order_type: "limit".into(),
                    price: Some(d("1.25")),
                    quantity: d("1"),
                    size_known: true,
                    notional: None,
                    filled: d("1"),
                    duration: "day".into(),
                    state: "open".into(),
                    legs: vec![leg("SPXW260417C05800000", "buy_to_open"), leg("SPXW260417C05850000", "sell_to_open")],
                }],
                ..Default::default()
            };
            let modify = |st: &BotState, price: &str| {
                let e = strategy_webhook::Engine::new();
                let mut live = s.clone();
                live.bots[0].working_orders = st.to_core().unwrap().1;
                e.upsert(live).unwrap();
                let body = format!(r#"{{"ticker":"SPX","action":"modify","direction":"long","price":{price}}}"#);
                let out = e.deliver(SPX_TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), 1_774_000_000_000);
                out.orders.into_iter().next().unwrap_or_else(|| panic!("{b:?}: a replace: {}", out.response)).order
            };
            let per_leg = |q: Decimal, ratio: u32| q.checked_mul(Decimal::from(ratio)).unwrap();
            let sent = modify(&st, "1.10");
            assert_eq!(per_leg(sent.quantity, sent.legs[0].ratio), d("2"), "{b:?}: two verticals sent");
            let new_id = (!b.broker().replace_keeps_id()).then(|| "1004055540392".to_owned());
            assert!(st.replaced("1004055540391", new_id, &sent));
            let rec = &st.working_orders[0];
            // Kept, the id keeps its fills (two verticals of the four), counted in the units it records now.
            let filled = if b.broker().replace_keeps_id() { d("2") } else { Decimal::ZERO };
            assert_eq!(per_leg(rec.filled, rec.legs[0].ratio), filled, "{b:?}: filled as recorded: {rec:?}");
            let again = modify(&st, "1.05");
            assert_eq!(
                (per_leg(rec.quantity, rec.legs[0].ratio), per_leg(again.quantity, again.legs[0].ratio)),
                (d("2"), d("2")),
                "{b:?}: recorded {rec:?}; the next price MODIFY sent {} units of {:?}",
                again.quantity,
                again.legs.iter().map(|l| l.ratio).collect::<Vec<_>>()
            );
        }
        assert!(tried > 1, "brokers that take index options: {tried}");
    }

    /// A GTC exit placed as two units of 2:2 (four verticals), re-priced at a broker that keeps the id: the state
    /// records it as sent, four units of 1:1, while the broker lists it as it was placed. Missing from the list (older
    /// than the list reaches) and read back working, it took the read's 2 beside its recorded 1:1 legs: two verticals
    /// recorded where four work (here one unit of 2:2 filled, one left), and the next MODIFY of its price halved it.
    #[test]
    fn an_order_read_back_with_a_common_factor_keeps_its_contracts() {
        const SHORT: &str = "SPXW260417C05800000";
        const LONG: &str = "SPXW260417C05850000";
        let leg = |symbol: &str, action: &str| LegRec { symbol: symbol.into(), action: action.into(), ratio: 1 };
        let recorded = OrderRec {
            id: "X".into(),
            instrument: "SPX".into(),
            direction: "long".into(),
            intent: "exit".into(),
            order_type: "limit".into(),
            price: Some(d("-1.9")),
            quantity: d("4"),
            size_known: true,
            notional: None,
            filled: Decimal::ZERO,
            duration: "gtc".into(),
            state: "open".into(),
            legs: vec![leg(SHORT, "sell_to_close"), leg(LONG, "buy_to_close")],
        };
        let mut read = order("X", "SPX", AssetClass::Option, OrderSide::Sell, "2");
        read.filled_quantity = d("1");
        read.legs = vec![spread_leg(SHORT, LegAction::SellToClose), spread_leg(LONG, LegAction::BuyToClose)];
        read.legs.iter_mut().for_each(|l| (l.ratio, l.quantity) = (2, d("4")));
        let o = as_read_back(recorded, &read);
        let per_leg = |q: Decimal| q.checked_mul(Decimal::from(o.legs[0].ratio)).unwrap();
        assert_eq!((per_leg(o.quantity), per_leg(o.filled)), (d("2"), d("2")), "contracts a leg: {o:?}");
    }

    /// A working order of the state read back by its id in an answer stating no count of it (read as zero) kept its
    /// recorded size beside the read's fills: 10 left of an order of 10 with 4 filled, and a MODIFY sent at a broker
    /// whose change states the whole size (left plus filled) grew it to 14. With no count to measure against, the
    /// order stays as recorded until a read states one.
    #[test]
    fn an_order_read_back_with_no_count_stays_as_recorded() {
        let recorded = OrderRec {
            id: "X".into(),
            instrument: "AAPL".into(),
            direction: "long".into(),
            intent: "entry".into(),
            order_type: "limit".into(),
            price: Some(d("185")),
            quantity: d("10"),
            size_known: true,
            notional: None,
            filled: Decimal::ZERO,
            duration: "gtc".into(),
            state: "open".into(),
            legs: Vec::new(),
        };
        let mut read = order("X", "AAPL", AssetClass::Equity, OrderSide::Buy, "0");
        (read.status, read.filled_quantity) = (OrderStatus::Unknown, d("4"));
        assert_eq!(as_read_back(recorded.clone(), &read), recorded);
    }

    /// The same for a replace whose new order a sync listed before the answer: the listed copy takes the side
    /// recorded for the order it replaces, not the one guessed from the listing.
    #[test]
    fn a_replacement_listed_before_its_answer_keeps_the_replaced_orders_side() {
        let s = puts_for_short();
        let mut st = to_state(&s, &[], &[listed_put("A"), listed_put("B")]);
        st.working_orders[0].direction = "short".into();
        assert_eq!(st.working_orders[1].direction, "long", "the sync's guess for the listed replacement");
        assert!(st.replaced("A", Some("B".into()), &sent_open_short()));
        let ids: Vec<(&str, &str)> = st.working_orders.iter().map(|o| (o.id.as_str(), o.direction.as_str())).collect();
        assert_eq!(ids, [("B", "short")]);
    }

    /// The same when the sync read the old order already replaced (a final status, so it left the state) and
    /// the new one listed: nothing recorded is left to carry, and the delivered order's side (built from the old
    /// one's) is taken, not the sync's guess.
    #[test]
    fn a_replacement_listed_after_the_old_order_ended_keeps_the_delivered_side() {
        let s = puts_for_short();
        let mut before = to_state(&s, &[], &[listed_put("A")]);
        before.working_orders[0].direction = "short".into();
        let mut old_a = listed_put("A");
        old_a.status = OrderStatus::Replaced;
        old_a.broker_status = "replaced".into();
        let orders = [old_a, listed_put("B")];
        let mut st = to_state(&s, &[], &orders);
        keep_recorded_sides(&s, &before, &mut st);
        drop_replaced(&before, &mut st, &orders, now_ms());
        assert!(st.replaced("A", Some("B".into()), &sent_open_short()));
        assert_eq!(cancels_short(&s, &st), 1);
    }

    #[test]
    fn an_order_being_replaced_is_not_read_back_beside_its_replacement() {
        let s = strategy(|v| v["allowed_instruments"] = serde_json::json!(["AAPL"]));
        let positions = [position("AAPL", AssetClass::Equity, true, "10")];
        let old_exit = order("A", "AAPL", AssetClass::Equity, OrderSide::Sell, "10");
        let new_exit = order("B", "AAPL", AssetClass::Equity, OrderSide::Sell, "10");
        // The bot as the replace's delivery left it.
        let mut before = to_state(&s, &positions, std::slice::from_ref(&old_exit));
        let o = before.working_orders[0].clone();
        let json = format!(
            r#"{{"asset_class":"equity","symbol":"AAPL","intent":"close_long","quantity":{},"order_type":"limit",
                "limit_price":"190","duration":"day","legs":[],"client_order_id":"swh-1"}}"#,
            o.quantity
        );
        let modify: strategy_webhook::model::Order = serde_json::from_str(&json).unwrap();
        assert!(before.replaced("A", Some("B".into()), &modify));
        assert_eq!(before.replaced.iter().map(|r| (r.old.as_str(), r.new.as_str())).collect::<Vec<_>>(), [("A", "B")]);
        let now = now_ms();
        let mut pending = old_exit.clone();
        pending.broker_status = "pending_replace".into();
        let orders = [pending, new_exit.clone()];
        let mut read = to_state(&s, &positions, &orders);
        drop_replaced(&before, &mut read, &orders, now);
        let ids: Vec<&str> = read.working_orders.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, ["B"], "one exit, the replacement");
        assert_eq!(read.replaced.len(), 1, "kept while the broker lists it as working");
        // The replace done: the old order is final, and the note kept while its replacement works (a cancel
        // decided against the old order goes to it).
        let mut done = old_exit.clone();
        done.status = OrderStatus::Replaced;
        let orders = [done, new_exit.clone()];
        let mut later = to_state(&s, &positions, &orders);
        drop_replaced(&read, &mut later, &orders, now);
        assert_eq!(later.working_orders.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(), ["B"]);
        assert_eq!(later.replaced.len(), 1);
        // The replacement done too: forgotten.
        let mut filled = new_exit.clone();
        filled.status = OrderStatus::Filled;
        let orders = [filled];
        let mut after = to_state(&s, &positions, &orders);
        drop_replaced(&later, &mut after, &orders, now);
        assert!(after.replaced.is_empty());
        // A replace the broker gave up (the old order filled in part, the new one refused): the old order stands
        // and is read back, or a CLOSE would not cancel it first and it could fill past the close.
        let mut refused = new_exit.clone();
        refused.status = OrderStatus::Rejected;
        let orders = [old_exit.clone(), refused];
        let mut gave_up = to_state(&s, &positions, &orders);
        drop_replaced(&read, &mut gave_up, &orders, now);
        assert_eq!(gave_up.working_orders.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(), ["A"]);
        assert!(gave_up.replaced.is_empty());
        // The new order not listed: a moment after the replace it may not be yet; a minute on, the old one stands.
        let orders = [old_exit];
        let mut soon = to_state(&s, &positions, &orders);
        drop_replaced(&read, &mut soon, &orders, now + 1_000);
        assert!(soon.working_orders.is_empty(), "{:?}", soon.working_orders);
        let mut late = to_state(&s, &positions, &orders);
        drop_replaced(&read, &mut late, &orders, now + 120_000);
        assert_eq!(late.working_orders.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(), ["A"]);
    }

    #[test]
    fn equities_keep_only_what_the_strategy_trades_and_orders_read_as_entries_or_exits() {
        let s = strategy(|v| v["allowed_instruments"] = serde_json::json!(["AAPL", "TSLA"]));
        let positions = [
            position("AAPL", AssetClass::Equity, true, "10"),
            position("TSLA", AssetClass::Equity, false, "15"),
            position("NFLX", AssetClass::Equity, true, "3"),
            position("SPXW260320C05800000", AssetClass::Option, true, "2"),
        ];
        let mut cover = order("2", "TSLA", AssetClass::Equity, OrderSide::Buy, "25");
        cover.filled_quantity = d("10");
        let mut filled = order("3", "AAPL", AssetClass::Equity, OrderSide::Buy, "10");
        filled.status = OrderStatus::Filled;
        let mut stop = order("4", "AAPL", AssetClass::Equity, OrderSide::Sell, "10");
        stop.order_type = None;
        // Filled in full, still settling: Alpaca's `calculated` reads as working.
        let mut settling = order("5", "AAPL", AssetClass::Equity, OrderSide::Buy, "10");
        (settling.filled_quantity, settling.broker_status) = (d("10"), "calculated".into());
        let orders = [order("1", "AAPL", AssetClass::Equity, OrderSide::Buy, "10"), cover, filled, stop, settling];
        let st = to_state(&s, &positions, &orders);
        let held: Vec<(&str, &str, String)> = st
            .positions
            .iter()
            .map(|p| (p.instrument.as_str(), p.direction.as_str(), p.quantity.to_string()))
            .collect();
        // Another instrument and the option contract are not this equity strategy's.
        assert_eq!(held, [("AAPL", "long", "10".into()), ("TSLA", "short", "15".into())]);
        let working: Vec<(&str, &str, &str, String)> = st
            .working_orders
            .iter()
            .map(|o| (o.id.as_str(), o.intent.as_str(), o.direction.as_str(), o.quantity.to_string()))
            .collect();
        // A filled order is not working (nor one filled in full under a working status), and the partly filled buy
        // against a held short is an exit with 15 left. A sell of a kind this library does not place (a stop) is the
        // long's exit of type `other`: left out, a CLOSE sold beside the shares it held.
        assert_eq!(
            working,
            [
                ("1", "entry", "long", "10".into()),
                ("2", "exit", "short", "15".into()),
                ("4", "exit", "long", "10".into())
            ]
        );
        let types: Vec<&str> = st.working_orders.iter().map(|o| o.order_type.as_str()).collect();
        assert_eq!(types, ["limit", "limit", "other"]);
        // The fills go with it, for a broker whose change states the whole size (15 left + 10 filled).
        let fills: Vec<String> = st.working_orders.iter().map(|o| o.filled.to_string()).collect();
        assert_eq!(fills, ["0", "10", "0"]);
        let (_, core) = st.to_core().expect("the snapshot takes the synced state");
        assert_eq!(core[1].filled, d("10"));
    }

    /// A working order whose broker states no count (a trader's order sized in dollars, read with its status
    /// unknown; or a reader that took a missing size for 0) was stored as a working order of 0: a state the strategy's
    /// own checks refuse (`working_orders[j].quantity must be above zero`, so a host loading states through the
    /// snapshot was refused the whole of it), which the engine took unchecked here: a MODIFY of it was sized from 0,
    /// and beside the bot's own entry every MODIFY naming neither order was refused as ambiguous. Then it was left
    /// out, and a CLOSE sold beside it ([`a_close_cancels_a_working_dollar_sell_first`]). It is stored as an order
    /// whose size is not known, with the amount it was sized by: the snapshot takes it, a MODIFY naming neither
    /// order changes the bot's own entry, and one naming it is refused with the reason.
    #[test]
    fn a_working_order_with_no_count_is_stored_as_one_whose_size_is_not_known() {
        let s = strategy(|v| v["allowed_instruments"] = serde_json::json!(["AAPL"]));
        let mut by_amount = order("n1", "AAPL", AssetClass::Equity, OrderSide::Buy, "0");
        (by_amount.status, by_amount.notional, by_amount.order_type) =
            (OrderStatus::Unknown, Some(d("500")), Some(OrderType::Market));
        let zero = order("z1", "AAPL", AssetClass::Equity, OrderSide::Buy, "0");
        let mut part = order("z2", "AAPL", AssetClass::Equity, OrderSide::Buy, "0");
        part.filled_quantity = d("1.5");
        let entry = order("1", "AAPL", AssetClass::Equity, OrderSide::Buy, "10");
        let st = to_state(&s, &[], &[by_amount, zero, part, entry]);
        // Each order as the snapshot lists it: id, intent, quantity, size_known, notional, filled.
        let stored: Vec<String> = st
            .working_orders
            .iter()
            .map(|o| {
                let notional = o.notional.map_or("-".to_owned(), |n| n.to_string());
                format!("{} {} {} {} {notional} {}", o.id, o.intent, o.quantity, o.size_known, o.filled)
            })
            .collect();
        assert_eq!(
            stored,
            ["n1 entry 0 false 500 0", "z1 entry 0 false - 0", "z2 entry 0 false - 1.5", "1 entry 10 true - 0"]
        );
        // Stored and read back as the server stores states, and loaded as a host loads a snapshot.
        let st: BotState = serde_json::from_str(&serde_json::to_string(&st).unwrap()).unwrap();
        let (positions, working) = st.to_core().unwrap();
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        v["allowed_instruments"] = serde_json::json!(["AAPL"]);
        v["bots"][0]["working_orders"] = serde_json::to_value(&st.working_orders).unwrap();
        Strategy::from_json(v.to_string().as_bytes()).expect("the snapshot takes an order whose size is not known");
        let mut live = s.clone();
        (live.bots[0].positions, live.bots[0].working_orders) = (positions, working);
        let e = strategy_webhook::Engine::new();
        e.upsert(live).unwrap();
        let modify = |body: &str, at: i64| {
            let out =
                e.deliver(SPX_TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), 1_774_000_000_000 + at);
            let sent: Vec<_> = out.orders.iter().map(|r| (r.order.quantity.to_string(), r.order.limit_price)).collect();
            (sent, out.response.into_owned())
        };
        let (sent, _) = modify(r#"{"ticker":"AAPL","action":"modify","direction":"long","price":"180"}"#, 0);
        assert_eq!(sent, [("10".to_owned(), Some(d("180")))], "the bot's own entry, re-priced");
        let (sent, response) =
            modify(r#"{"ticker":"AAPL","action":"modify","direction":"long","order_id":"n1","price":"180"}"#, 1);
        assert!(sent.is_empty() && response.contains("n1 is sized by an amount of money (500)"), "{response}");
    }

    /// A bracket placed by hand whose buy filled keeps its take-profit (a limit sell of the 10 shares held) only
    /// in the parent's `legs`: the state showed "long 10 AAPL, no working exit", and a CLOSE sold beside the
    /// take-profit instead of cancelling it first. The take-profit is the long's working exit now, and so is the
    /// stop, of a kind this library does not send (`other`): a CLOSE pulls both. Before the buy fills, its children
    /// are exits of the long it opens, never a short's entry.
    #[test]
    fn a_hand_placed_brackets_take_profit_is_the_longs_working_exit() {
        let s = strategy(|v| v["allowed_instruments"] = serde_json::json!(["AAPL"]));
        let bracket = |entry: &str| {
            format!(
                r#"[{{"id":"p1","symbol":"AAPL","asset_class":"us_equity","qty":"10","filled_qty":"{}",
                "order_class":"bracket","type":"limit","limit_price":"190","side":"buy","time_in_force":"gtc",
                "status":"{entry}","legs":[
                {{"id":"tp1","symbol":"AAPL","asset_class":"us_equity","qty":"10","filled_qty":"0","order_class":"bracket",
                  "type":"limit","side":"sell","time_in_force":"gtc","limit_price":"200","status":"{}"}},
                {{"id":"sl1","symbol":"AAPL","asset_class":"us_equity","qty":"10","filled_qty":"0","order_class":"bracket",
                  "type":"stop","side":"sell","time_in_force":"gtc","stop_price":"180","status":"held"}}]}}]"#,
                if entry == "filled" { "10" } else { "0" },
                if entry == "filled" { "new" } else { "held" },
            )
        };
        // The broker whose working-order read nests a bracket's children (the server names no broker).
        let (broker, req) = strategy_webhook::broker::BrokerId::ALL
            .into_iter()
            .find_map(|b| {
                let req = b.broker().open_orders_request("", 0).ok()?;
                req.path.contains("nested=true").then(|| (b.broker(), req))
            })
            .expect("a broker that nests a bracket's children");
        let working = |st: &BotState| -> Vec<(String, String, String, String)> {
            st.working_orders
                .iter()
                .map(|o| (o.id.clone(), o.intent.clone(), o.direction.clone(), o.quantity.to_string()))
                .collect()
        };
        let (orders, _) = broker.parse_orders_page(&req, bracket("filled").as_bytes()).unwrap();
        let st = to_state(&s, &[position("AAPL", AssetClass::Equity, true, "10")], &orders);
        let exit = ("tp1".to_owned(), "exit".to_owned(), "long".to_owned(), "10".to_owned());
        let stop = ("sl1".to_owned(), "exit".to_owned(), "long".to_owned(), "10".to_owned());
        assert_eq!(working(&st), [exit.clone(), stop.clone()]);
        assert_eq!(st.working_orders[0].price, Some(d("200")));
        assert_eq!((st.working_orders[1].order_type.as_str(), st.working_orders[1].price), ("other", None));
        let (orders, _) = broker.parse_orders_page(&req, bracket("new").as_bytes()).unwrap();
        let st = to_state(&s, &[], &orders);
        let entry = ("p1".to_owned(), "entry".to_owned(), "long".to_owned(), "10".to_owned());
        assert_eq!(working(&st), [entry, exit, stop]);
    }

    /// A trader's limit BUY of ETH on ETH-BTC pays in BTC: the wallet's hold reserves the BTC it spends, as a BTC sell
    /// on BTC-USDC does. Left out of the state, a CLOSE of BTC/USD sold the whole balance beside the hold, and the
    /// broker refused it for insufficient balance. It is the long's working exit (`other`): a CLOSE cancels it first.
    #[test]
    fn a_buy_paid_in_the_coin_on_another_pair_is_kept_as_an_exit() {
        let (id, broker) = strategy_webhook::broker::BrokerId::ALL
            .into_iter()
            .find(|b| b.broker().offers(AssetClass::Crypto) && !b.broker().offers(AssetClass::Equity))
            .map(|b| (b, b.broker()))
            .expect("a broker that trades crypto alone");
        let s = strategy(|v| {
            (v["asset_class"], v["order_type"], v["duration"]) = ("crypto".into(), "market".into(), "gtc".into());
            v["allowed_instruments"] = serde_json::json!(["BTC/USD"]);
            v.as_object_mut().unwrap().remove("options");
            v["bots"] = serde_json::json!([{"id": "b", "broker": id.as_str(), "account_id": "A1",
                                            "sizing": {"fixed_quantity": "0.05"}}]);
        });
        let body = r#"{"orders":[{"order_id":"eb1","product_id":"ETH-BTC","side":"BUY","status":"OPEN","filled_size":"0",
            "order_configuration":{"limit_limit_gtc":{"base_size":"1","limit_price":"0.04"}}}],"has_next":false,"cursor":""}"#;
        let orders = broker.parse_orders(body.as_bytes()).unwrap();
        assert_eq!(orders.len(), 1, "the order is read");
        let st = to_state(&s, &[position("BTC", AssetClass::Crypto, true, "0.05")], &orders);
        let ids: Vec<&str> = st.working_orders.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, ["eb1"], "the ETH-BTC buy holding 0.04 BTC is not among the bot's working orders");
        // Filed as a sell of BTC (the coin a CLOSE of any BTC pair pulls first), of a kind no MODIFY restates, sized
        // by the BTC it holds back.
        let o = &st.working_orders[0];
        let got = (o.instrument.as_str(), o.direction.as_str(), o.intent.as_str(), o.order_type.as_str());
        assert_eq!(got, ("BTC/ETH", "long", "exit", "other"));
        assert_eq!((o.quantity.to_string(), o.size_known), ("0.04".to_owned(), true));
    }

    /// The same buy paid in BTC on ETH-BTC, where the strategy trades that pair too (BTC/USD and ETH/BTC, or `*`):
    /// the wallet holds the BTC it spends just the same, but as a pair the strategy trades it is filed as an ETH/BTC
    /// entry, which no CLOSE of BTC/USD pulled: the CLOSE sold the whole wallet (available plus hold) beside the
    /// hold, and the broker refused it for insufficient balance. It stays that pair's entry (no second copy of it in
    /// the state), and the core's CLOSE of the coin cancels it first, as a buy on a pair quoted in BTC.
    #[test]
    fn a_buy_paid_in_the_coin_on_a_pair_the_strategy_trades_is_pulled_by_a_close_of_the_coin() {
        let (id, broker) = strategy_webhook::broker::BrokerId::ALL
            .into_iter()
            .find(|b| b.broker().offers(AssetClass::Crypto) && !b.broker().offers(AssetClass::Equity))
            .map(|b| (b, b.broker()))
            .expect("a broker that trades crypto alone");
        for allowed in [serde_json::json!(["BTC/USD", "ETH/BTC"]), serde_json::json!(["*"])] {
            let s = strategy(|v| {
                (v["asset_class"], v["order_type"], v["duration"]) = ("crypto".into(), "market".into(), "gtc".into());
                v["allowed_instruments"] = allowed.clone();
                v.as_object_mut().unwrap().remove("options");
                v["bots"] = serde_json::json!([{"id": "b", "broker": id.as_str(), "account_id": "A1",
                                                "sizing": {"fixed_quantity": "0.05"}}]);
            });
            let body = r#"{"orders":[{"order_id":"eb1","product_id":"ETH-BTC","side":"BUY","status":"OPEN","filled_size":"0",
                "order_configuration":{"limit_limit_gtc":{"base_size":"1","limit_price":"0.04"}}}],"has_next":false,"cursor":""}"#;
            let orders = broker.parse_orders(body.as_bytes()).unwrap();
            let st = to_state(&s, &[position("BTC", AssetClass::Crypto, true, "0.05")], &orders);
            let listed: Vec<(&str, &str, &str)> =
                st.working_orders.iter().map(|o| (o.id.as_str(), o.instrument.as_str(), o.intent.as_str())).collect();
            assert_eq!(listed, [("eb1", "ETH/BTC", "entry")], "allowed {allowed}");
            let st: BotState = serde_json::from_str(&serde_json::to_string(&st).unwrap()).unwrap();
            let (positions, working) = st.to_core().expect("the snapshot takes the synced state");
            let mut live = s.clone();
            (live.bots[0].positions, live.bots[0].working_orders) = (positions, working);
            live.market
                .quotes
                .insert("BTC/USD".into(), serde_json::from_str(r#"{"bid":"60000","ask":"60010"}"#).unwrap());
            let e = strategy_webhook::Engine::new();
            e.upsert(live).unwrap();
            let body = r#"{"ticker":"BTCUSD","action":"close","direction":"long"}"#;
            let out = e.deliver(SPX_TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), 1_774_000_000_000);
            let sent: Vec<(RequestKind, Option<&str>)> =
                out.orders.iter().map(|r| (r.kind, r.order_id.as_deref())).collect();
            assert_eq!(
                sent,
                [(RequestKind::Cancel, Some("eb1")), (RequestKind::Place, None)],
                "allowed {allowed}: the ETH-BTC buy holding 0.04 BTC is not cancelled before the CLOSE: {}",
                out.response
            );
            assert_eq!(
                out.orders[1].after.as_ref(),
                Some(&out.orders[0].client_order_id),
                "the sell waits for the cancel"
            );
            assert_eq!(out.orders[1].order.quantity, d("0.05"));
        }
    }

    /// A trader's own orders on a coin the strategy trades, at the broker that trades crypto alone: a stop-limit, a
    /// bracket, a stop-limit good till a date and a limit good till a date on the strategy's pair, all read with no
    /// order type or time in force the core sends; a limit sell and a limit buy of the coin on another pair. Each
    /// sell holds coins the strategy's CLOSE sells. Left out of the state (a kind not placed here, a pair not
    /// traded here), the CLOSE sold the whole balance beside them, the broker refused it for insufficient balance,
    /// and the position stayed open. Every sell is the long's working exit now (`other` where its kind or time in
    /// force is the broker's own): a CLOSE cancels each first and the sell waits on the last cancel; a MODIFY never
    /// restates one. The buy on the other pair sells nothing held: it stays out, and no CLOSE pulls it.
    #[test]
    fn a_traders_stop_limit_and_sells_of_the_coin_on_another_pair_are_exits_a_close_cancels_first() {
        let (id, broker) = strategy_webhook::broker::BrokerId::ALL
            .into_iter()
            .find(|b| b.broker().offers(AssetClass::Crypto) && !b.broker().offers(AssetClass::Equity))
            .map(|b| (b, b.broker()))
            .expect("a broker that trades crypto alone");
        let s = strategy(|v| {
            (v["asset_class"], v["order_type"], v["duration"]) = ("crypto".into(), "market".into(), "gtc".into());
            v["allowed_instruments"] = serde_json::json!(["BTC/USD"]);
            v.as_object_mut().unwrap().remove("options");
            v["bots"] = serde_json::json!([{"id": "b", "broker": id.as_str(), "account_id": "A1",
                                            "sizing": {"fixed_quantity": "0.05"}}]);
        });
        let config = |kind: &str, terms: &str| format!(r#"{{"{kind}":{{"base_size":"0.05",{terms}}}}}"#);
        let row = |id: &str, product: &str, side: &str, configuration: String| {
            format!(
                r#"{{"order_id":"{id}","product_id":"{product}","side":"{side}","status":"OPEN","filled_size":"0",
                "order_configuration":{configuration}}}"#
            )
        };
        let rows = [
            row(
                "sl1",
                "BTC-USD",
                "SELL",
                config("stop_limit_stop_limit_gtc", r#""limit_price":"58000","stop_price":"58500""#),
            ),
            row(
                "tb1",
                "BTC-USD",
                "SELL",
                config("trigger_bracket_gtc", r#""limit_price":"70000","stop_trigger_price":"55000""#),
            ),
            row(
                "sg1",
                "BTC-USD",
                "SELL",
                config(
                    "stop_limit_stop_limit_gtd",
                    r#""limit_price":"57000","stop_price":"57500","end_time":"2026-12-31T00:00:00Z""#,
                ),
            ),
            row(
                "lg1",
                "BTC-USD",
                "SELL",
                config("limit_limit_gtd", r#""limit_price":"72000","end_time":"2026-12-31T00:00:00Z""#),
            ),
            row("us1", "BTC-USDC", "SELL", config("limit_limit_gtc", r#""limit_price":"75000""#)),
            row("ub1", "BTC-USDC", "BUY", config("limit_limit_gtc", r#""limit_price":"50000""#)),
        ];
        let body = format!(r#"{{"orders":[{}],"has_next":false,"cursor":""}}"#, rows.join(","));
        let orders = broker.parse_orders(body.as_bytes()).unwrap();
        let st = to_state(&s, &[position("BTC", AssetClass::Crypto, true, "0.05")], &orders);
        let stored: Vec<String> = st
            .working_orders
            .iter()
            .map(|o| format!("{} {} {} {} {} {}", o.id, o.instrument, o.intent, o.direction, o.order_type, o.duration))
            .collect();
        assert_eq!(
            stored,
            [
                "sl1 BTC/USD exit long other other",
                "tb1 BTC/USD exit long other other",
                "sg1 BTC/USD exit long other other",
                "lg1 BTC/USD exit long limit other",
                "us1 BTC/USDC exit long limit gtc",
            ]
        );
        // Stored and read back as the server stores states, and loaded into the core as the server loads it.
        let st: BotState = serde_json::from_str(&serde_json::to_string(&st).unwrap()).unwrap();
        let (positions, working) = st.to_core().expect("the snapshot takes the synced state");
        let mut live = s.clone();
        (live.bots[0].positions, live.bots[0].working_orders) = (positions, working);
        live.market.quotes.insert("BTC/USD".into(), serde_json::from_str(r#"{"bid":"60000","ask":"60010"}"#).unwrap());
        let e = strategy_webhook::Engine::new();
        e.upsert(live).unwrap();
        let deliver = |body: &str, at: i64| {
            e.deliver(SPX_TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), 1_774_000_000_000 + at)
        };
        let out = deliver(r#"{"ticker":"BTCUSD","action":"close","direction":"long"}"#, 0);
        let sent: Vec<(RequestKind, Option<&str>)> =
            out.orders.iter().map(|r| (r.kind, r.order_id.as_deref())).collect();
        assert_eq!(
            sent,
            [
                (RequestKind::Cancel, Some("sl1")),
                (RequestKind::Cancel, Some("tb1")),
                (RequestKind::Cancel, Some("sg1")),
                (RequestKind::Cancel, Some("lg1")),
                (RequestKind::Cancel, Some("us1")),
                (RequestKind::Place, None),
            ],
            "{}",
            out.response
        );
        // Each waits on the one before; the sell on the last cancel.
        for w in out.orders.windows(2) {
            assert_eq!(w[1].after.as_ref(), Some(&w[0].client_order_id));
        }
        assert_eq!(out.orders[5].order.quantity, d("0.05"));
        // A MODIFY meaning the stop-limit (the only working order a price could move but for the others) is refused.
        let out =
            deliver(r#"{"ticker":"BTCUSD","action":"modify","direction":"long","order_id":"sl1","price":"59000"}"#, 1);
        assert!(out.orders.is_empty(), "{}", out.response);
        assert!(
            out.response.contains("sl1") && out.response.contains("kind this library does not place"),
            "{}",
            out.response
        );
    }

    /// A working order in a time in force the core has no word for (an exit to fill at the open, as another broker's
    /// GTC Ext or pre-market order) is stored as `other`. Stored as `day`, a MODIFY of its price re-sent it as a day
    /// order: an opening-auction exit filled intraday, a GTC Ext take-profit expired that night. The MODIFY is now
    /// refused with the reason; a CLOSE still pulls it before closing (a cancel names the order by its id alone).
    #[test]
    fn a_working_order_in_the_brokers_own_time_in_force_is_stored_as_other_and_never_re_sent() {
        // The broker whose working-order read nests a bracket's children (the server names no broker), whose
        // time in force `opg` (at the open) the core does not send.
        let (id, broker, req) = strategy_webhook::broker::BrokerId::ALL
            .into_iter()
            .find_map(|b| {
                let req = b.broker().open_orders_request("", 0).ok()?;
                req.path.contains("nested=true").then(|| (b, b.broker(), req))
            })
            .expect("a broker that nests a bracket's children");
        let s = strategy(|v| {
            v["allowed_instruments"] = serde_json::json!(["AAPL"]);
            v["bots"] = serde_json::json!([{"id": "b", "broker": id.as_str(), "account_id": "A1",
                                            "sizing": {"fixed_quantity": "10"}}]);
        });
        let listed = r#"[{"id":"x1","symbol":"AAPL","asset_class":"us_equity","qty":"10","filled_qty":"0",
            "order_class":"simple","type":"limit","limit_price":"200","side":"sell","time_in_force":"opg",
            "status":"new"}]"#;
        let (orders, _) = broker.parse_orders_page(&req, listed.as_bytes()).unwrap();
        let st = to_state(&s, &[position("AAPL", AssetClass::Equity, true, "10")], &orders);
        let exit = st.working_orders.iter().map(|o| (o.id.as_str(), o.intent.as_str(), o.duration.as_str()));
        assert_eq!(exit.collect::<Vec<_>>(), [("x1", "exit", "other")]);

        let (positions, working) = st.to_core().expect("the snapshot takes the synced state");
        let mut live = s.clone();
        live.bots[0].positions = positions;
        live.bots[0].working_orders = working;
        let e = strategy_webhook::Engine::new();
        e.upsert(live).unwrap();
        let deliver = |body: &str, at: i64| {
            e.deliver(SPX_TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), 1_774_000_000_000 + at)
        };
        let sent = |o: &strategy_webhook::Outcome| -> Vec<String> {
            o.orders.iter().map(|r| String::from_utf8_lossy(r.request.body.as_bytes()).into_owned()).collect()
        };
        let modify = deliver(r#"{"ticker":"AAPL","action":"modify","direction":"long","price":"201"}"#, 0);
        assert!(modify.orders.is_empty(), "re-sent in another time in force: {:?}", sent(&modify));
        let json = modify.to_json();
        assert!(json.contains("x1 has a time in force this library does not send"), "{json}");
        let close = deliver(r#"{"ticker":"AAPL","action":"close","direction":"long"}"#, 1);
        let kinds: Vec<(RequestKind, Option<&str>)> =
            close.orders.iter().map(|r| (r.kind, r.order_id.as_deref())).collect();
        assert_eq!(kinds, [(RequestKind::Cancel, Some("x1")), (RequestKind::Place, None)], "{}", close.to_json());
    }

    /// a trader's working sell sized in dollars (Alpaca `notional`, `qty: null`) beside the long it sells
    /// from is left out of the bot's state, so a CLOSE sells the whole position beside it instead of cancelling it
    /// first, as it does for the same sell sized by count.
    #[test]
    fn a_close_cancels_a_working_dollar_sell_first() {
        let (id, broker, req) = strategy_webhook::broker::BrokerId::ALL
            .into_iter()
            .find_map(|b| {
                let req = b.broker().open_orders_request("", 0).ok()?;
                req.path.contains("nested=true").then(|| (b, b.broker(), req))
            })
            .expect("a broker that nests a bracket's children, and lists an order sized in dollars");
        let s = strategy(|v| {
            v["allowed_instruments"] = serde_json::json!(["AAPL"]);
            v["bots"] = serde_json::json!([{"id": "b", "broker": id.as_str(), "account_id": "A1",
                                            "sizing": {"fixed_quantity": "10"}}]);
        });
        let listed = |size: &str| {
            format!(
                r#"[{{"id":"n1","symbol":"AAPL","asset_class":"us_equity",{size},"filled_qty":"0",
            "order_class":"","type":"market","side":"sell","time_in_force":"day","status":"accepted"}}]"#
            )
        };
        let close_of = |size: &str| {
            let (orders, _) = broker.parse_orders_page(&req, listed(size).as_bytes()).unwrap();
            let st = to_state(&s, &[position("AAPL", AssetClass::Equity, true, "10")], &orders);
            let (positions, working) = st.to_core().expect("the snapshot takes the synced state");
            let mut live = s.clone();
            live.bots[0].positions = positions;
            live.bots[0].working_orders = working;
            let e = strategy_webhook::Engine::new();
            e.upsert(live).unwrap();
            let close = e.deliver(
                SPX_TOKEN.as_bytes(),
                br#"{"ticker":"AAPL","action":"close","direction":"long"}"#,
                Some("application/json"),
                1_774_000_000_000,
            );
            close.orders.iter().map(|r| (r.kind, r.order_id.clone())).collect::<Vec<_>>()
        };
        assert_eq!(
            close_of(r#""qty":"3","notional":null"#),
            [(RequestKind::Cancel, Some("n1".to_owned())), (RequestKind::Place, None)],
            "by count"
        );
        assert_eq!(
            close_of(r#""qty":null,"notional":"500""#),
            [(RequestKind::Cancel, Some("n1".to_owned())), (RequestKind::Place, None)],
            "by dollars"
        );
    }

    /// A strategy allowing any instrument (`*`) kept no position and no order from a sync: `*` was read as an
    /// instrument, and matched none.
    #[test]
    fn a_strategy_allowing_any_instrument_keeps_every_position_and_order() {
        let s = strategy(|v| v["allowed_instruments"] = serde_json::json!(["*"]));
        let positions =
            [position("AAPL", AssetClass::Equity, true, "10"), position("NFLX", AssetClass::Equity, false, "3")];
        let orders = [order("1", "MSFT", AssetClass::Equity, OrderSide::Buy, "5")];
        let st = to_state(&s, &positions, &orders);
        let held: Vec<&str> = st.positions.iter().map(|p| p.instrument.as_str()).collect();
        assert_eq!(held, ["AAPL", "NFLX"]);
        assert_eq!(st.working_orders.len(), 1);
    }

    /// Legs of contract counts that are not multiples of the smallest (long 2, short 3) were read as units of the
    /// smallest with truncated ratios (2 units of 1:1): a CLOSE then bought back 2 of the 3 short calls.
    #[test]
    fn uneven_option_legs_are_read_in_whole_units_that_close_every_contract() {
        let s = spx_strategy();
        let positions = [
            position("SPXW260320C05800000", AssetClass::Option, true, "4"),
            position("SPXW260320C05850000", AssetClass::Option, false, "6"),
        ];
        let st = to_state(&s, &positions, &[]);
        let p = &st.positions[0];
        let contracts: Vec<String> = p
            .legs
            .iter()
            .map(|l| (p.quantity * strategy_webhook::decimal::Decimal::from(l.ratio)).to_string())
            .collect();
        assert_eq!(contracts, ["4", "6"], "{p:?}");
        assert_eq!(p.quantity, d("2"));
    }

    /// A strategy whose short side buys puts: the broker's read says a put is bought (a debit), which the sync
    /// took for long, over the side the delivery recorded.
    #[test]
    fn option_sides_recorded_by_a_delivery_are_kept_over_the_reads_guess() {
        // An equity strategy: no leg rules to read a side from, so what is kept is the recorded side alone.
        let s = strategy(|_| {});
        let put = vec![LegRec { symbol: "SPY260320P00500000".into(), action: "buy_to_open".into(), ratio: 1 }];
        let rec = |id: &str, direction: &str| OrderRec {
            id: id.into(),
            instrument: "SPY".into(),
            direction: direction.into(),
            intent: "entry".into(),
            order_type: "limit".into(),
            price: Some(d("2.10")),
            quantity: d("1"),
            size_known: true,
            notional: None,
            filled: d("0"),
            duration: "day".into(),
            state: "open".into(),
            legs: put.clone(),
        };
        let position = |direction: &str| PositionRec {
            instrument: "SPY".into(),
            direction: direction.into(),
            quantity: d("1"),
            avg_price: None,
            legs: put.clone(),
        };
        let old = BotState { working_orders: vec![rec("9", "short")], ..BotState::default() };
        // Still working: the order keeps its side. Filled since: the position takes the order's.
        let mut new = BotState {
            working_orders: vec![rec("9", "long")],
            positions: vec![position("long")],
            ..BotState::default()
        };
        keep_recorded_sides(&s, &old, &mut new);
        assert_eq!((new.working_orders[0].direction.as_str(), new.positions[0].direction.as_str()), ("short", "short"));
        // A position the state held keeps its side too.
        let old = BotState { positions: vec![position("short")], ..BotState::default() };
        let mut new = BotState { positions: vec![position("long")], ..BotState::default() };
        keep_recorded_sides(&s, &old, &mut new);
        assert_eq!(new.positions[0].direction, "short");
        // The same contract held the other way (sold, not bought) is another position: the recorded side is not
        // its, and the working entry that sold it says which.
        let mut sold = position("short");
        sold.legs[0].action = "sell_to_open".into();
        let mut entry = rec("7", "long");
        entry.legs[0].action = "sell_to_open".into();
        let old = BotState { positions: vec![position("short")], working_orders: vec![entry], ..BotState::default() };
        let mut new = BotState { positions: vec![sold], ..BotState::default() };
        keep_recorded_sides(&s, &old, &mut new);
        assert_eq!(new.positions[0].direction, "long");
    }

    /// A strategy whose short side buys puts enters short twice on one underlying (a second alert on another day:
    /// the leg rules pick another expiration). Both structures are recorded short (the first as the position, the
    /// second as its working entry); the read after the second fill lists both puts bought, as one position of two
    /// legs. No recorded structure held exactly those contracts, nor did the leg rules build them alone, so the
    /// read's guess won: long (a leg is bought). The account was short (bearish puts), the bot believed it long,
    /// and a CLOSE SHORT found nothing to close: the puts stayed open.
    #[test]
    fn a_short_side_grown_by_a_second_structure_stays_short() {
        let s = puts_for_short();
        const P1: &str = "SPXW260320P05800000";
        const P2: &str = "SPXW260327P05750000";
        let leg = |sym: &str| LegRec { symbol: sym.into(), action: "buy_to_open".into(), ratio: 1 };
        let first = PositionRec {
            instrument: "SPX".into(),
            direction: "short".into(),
            quantity: d("1"),
            avg_price: None,
            legs: vec![leg(P1)],
        };
        let second = OrderRec {
            id: "E2".into(),
            instrument: "SPX".into(),
            direction: "short".into(),
            intent: "entry".into(),
            order_type: "limit".into(),
            price: Some(d("2.10")),
            quantity: d("1"),
            size_known: true,
            notional: None,
            filled: d("0"),
            duration: "day".into(),
            state: "open".into(),
            legs: vec![leg(P2)],
        };
        let old = BotState { positions: vec![first], working_orders: vec![second], ..BotState::default() };
        // The second entry filled: both puts are held, bought.
        let positions = [position(P1, AssetClass::Option, true, "1"), position(P2, AssetClass::Option, true, "1")];
        let mut new = to_state(&s, &positions, &[]);
        keep_recorded_sides(&s, &old, &mut new);
        assert_eq!(new.positions.len(), 1, "{new:?}");
        // What a CLOSE SHORT gets from the engine against that state.
        let e = strategy_webhook::Engine::new();
        let mut live = s.clone();
        live.bots[0].positions = new.to_core().unwrap().0;
        e.upsert(live).unwrap();
        let body = br#"{"ticker":"SPX","action":"close","direction":"short","price":4.2}"#;
        let closes = e.deliver(SPX_TOKEN.as_bytes(), body, Some("application/json"), 1_774_000_000_000).orders.len();
        assert_eq!(
            (new.positions[0].direction.as_str(), closes),
            ("short", 1),
            "two puts bought for the short side read back as a long position; CLOSE SHORT sends {closes} orders"
        );
    }

    /// A read position's side is taken from the records only when one side recorded every one of its contracts:
    /// taken from whichever record held one of them, a long structure grown beside a short one's leftover contract
    /// (or a contract bought by hand) would have been turned to the other side.
    #[test]
    fn a_position_whose_contracts_no_one_side_recorded_keeps_the_read_side() {
        let s = puts_for_short();
        let leg = |sym: &str| LegRec { symbol: sym.into(), action: "buy_to_open".into(), ratio: 1 };
        let rec = |direction: &str, symbols: &[&str]| PositionRec {
            instrument: "SPX".into(),
            direction: direction.into(),
            quantity: d("1"),
            avg_price: None,
            legs: symbols.iter().map(|s| leg(s)).collect(),
        };
        let (p1, p2, p3) = ("SPXW260320P05800000", "SPXW260327P05750000", "SPXW260403P05700000");
        let side = |old: Vec<PositionRec>, held: &[&str]| {
            let old = BotState { positions: old, ..BotState::default() };
            let mut new = BotState { positions: vec![rec("long", held)], ..BotState::default() };
            keep_recorded_sides(&s, &old, &mut new);
            new.positions[0].direction.clone()
        };
        // Part of what one side recorded (one structure closed by hand since): that side.
        assert_eq!(side(vec![rec("short", &[p1]), rec("short", &[p2, p3])], &[p1, p2]), "short");
        // A contract no record holds, or one each side recorded: the read's side.
        assert_eq!(side(vec![rec("short", &[p1])], &[p1, p2]), "long");
        assert_eq!(side(vec![rec("short", &[p1]), rec("long", &[p2])], &[p1, p2]), "long");
        assert_eq!(side(vec![rec("short", &[p1]), rec("short", &[p2]), rec("long", &[p2])], &[p1, p2]), "long");
        // Then, as before, the record holding exactly those contracts.
        assert_eq!(side(vec![rec("short", &[p1, p2]), rec("long", &[p2])], &[p1, p2]), "short");
    }

    /// A position a market order opened has no recorded side: the strategy's leg rules, where one side alone builds
    /// its legs, say which (a short side that buys puts read as long, so its CLOSE SHORT found nothing).
    #[test]
    fn an_option_position_without_a_recorded_side_takes_the_side_its_leg_rules_build() {
        let mut s = spx_strategy();
        let opts = s.options.as_mut().unwrap();
        let rule = |side: &str, action: &str| -> strategy_webhook::strategy::LegRule {
            serde_json::from_value(serde_json::json!({ "side": side, "action": action, "strike": { "atm_offset": 0 } }))
                .unwrap()
        };
        opts.legs.long = vec![rule("call", "buy_to_open")];
        opts.legs.short = vec![rule("put", "buy_to_open")];
        let positions = [position("SPXW260320P05800000", AssetClass::Option, true, "1")];
        let mut new = to_state(&s, &positions, &[]);
        assert_eq!(new.positions[0].direction, "long", "the read's guess: a bought contract");
        keep_recorded_sides(&s, &BotState::default(), &mut new);
        assert_eq!(new.positions[0].direction, "short");
        // A shape both sides build (or neither) says nothing.
        s.options.as_mut().unwrap().legs.long = vec![rule("put", "buy_to_open")];
        let mut new = to_state(&s, &positions, &[]);
        keep_recorded_sides(&s, &BotState::default(), &mut new);
        assert_eq!(new.positions[0].direction, "long");
    }

    /// An option position is named by its contract: a symbols map on an options bot renamed it to the bare
    /// underlying, and its legs then held no OCC symbol (every CLOSE refused).
    #[test]
    fn a_symbols_map_leaves_option_contracts_as_they_are() {
        let mut s = spx_strategy();
        s.bots[0].symbols.insert("SPXW".into(), "SPX".into());
        let mut positions = vec![position("SPXW260320C05800000", AssetClass::Option, true, "1")];
        as_strategy_names(&s, &s.bots[0], &mut positions, &mut []);
        let st = to_state(&s, &positions, &[]);
        assert_eq!(st.positions[0].legs[0].symbol, "SPXW260320C05800000");
    }

    /// A bot whose `symbols` map sends an instrument under the broker's name read it back under that name: its
    /// position was no position of the strategy (dropped, or a CLOSE in the alerts' name found nothing).
    #[test]
    fn positions_and_orders_read_under_a_mapped_name_take_the_strategys() {
        let s = strategy(|v| {
            v["allowed_instruments"] = serde_json::json!(["BRK.B"]);
            v["bots"][0]["symbols"] = serde_json::json!({ "BRK.B": "BRK/B" });
        });
        let mut positions = vec![position("BRK/B", AssetClass::Equity, true, "10")];
        let mut orders = vec![order("1", "BRK/B", AssetClass::Equity, OrderSide::Buy, "5")];
        as_strategy_names(&s, &s.bots[0], &mut positions, &mut orders);
        let st = to_state(&s, &positions, &orders);
        let held: Vec<&str> = st.positions.iter().map(|p| p.instrument.as_str()).collect();
        assert_eq!(held, ["BRK.B"]);
        assert_eq!(st.working_orders[0].instrument, "BRK.B");
        // Two keys for one broker name: the one the strategy allows.
        let s = strategy(|v| {
            v["allowed_instruments"] = serde_json::json!(["BRKB"]);
            v["bots"][0]["symbols"] = serde_json::json!({ "BRK.B": "BRK/B", "BRKB": "BRK/B" });
        });
        assert_eq!(strategy_name(&s, &s.bots[0], "BRK/B"), Some("BRKB"));
        // A coin balance whose pair the map names under another base.
        let s = strategy(|v| {
            v["asset_class"] = serde_json::json!("crypto");
            v["allowed_instruments"] = serde_json::json!(["XBTUSD"]);
            v["bots"][0]["symbols"] = serde_json::json!({ "XBTUSD": "BTC-USD" });
        });
        let mut bare = position("BTC", AssetClass::Crypto, true, "0.5");
        bare.pair = None;
        let mut positions = vec![bare];
        as_strategy_names(&s, &s.bots[0], &mut positions, &mut []);
        let st = to_state(&s, &positions, &[]);
        let held: Vec<&str> = st.positions.iter().map(|p| p.instrument.as_str()).collect();
        assert_eq!(held, ["XBT/USD"]);
        // Two keys map pairs of that coin: the one the strategy allows names it.
        let s = strategy(|v| {
            v["asset_class"] = serde_json::json!("crypto");
            v["allowed_instruments"] = serde_json::json!(["XBTUSD"]);
            v["bots"][0]["symbols"] = serde_json::json!({ "BTCUSDT": "BTC-USDC", "XBTUSD": "BTC-USD" });
        });
        let mut bare = position("BTC", AssetClass::Crypto, true, "0.5");
        bare.pair = None;
        let mut positions = vec![bare];
        as_strategy_names(&s, &s.bots[0], &mut positions, &mut []);
        let st = to_state(&s, &positions, &[]);
        let held: Vec<&str> = st.positions.iter().map(|p| p.instrument.as_str()).collect();
        assert_eq!(held, ["XBT/USD"]);
    }

    /// A crypto strategy trading any pair (`*`) at a broker that reports bare coin balances (Coinbase) kept none:
    /// a balance is named by a listed pair with that base, and `*` lists none.
    #[test]
    fn a_crypto_strategy_allowing_any_pair_keeps_bare_balances() {
        let s = strategy(|v| {
            v["asset_class"] = serde_json::json!("crypto");
            v["allowed_instruments"] = serde_json::json!(["*"]);
        });
        let bare = |coin: &str| {
            let mut p = position(coin, AssetClass::Crypto, true, "0.5");
            p.pair = None;
            p
        };
        let mut eth = order("9", "ETH-USDC", AssetClass::Crypto, OrderSide::Sell, "1");
        eth.pair = CryptoPair::parse("ETH-USDC");
        let st = to_state(&s, &[bare("BTC"), bare("ETH"), bare("USDC")], &[eth]);
        let held: Vec<&str> = st.positions.iter().map(|p| p.instrument.as_str()).collect();
        assert_eq!(held, ["BTC/USD", "ETH/USDC"], "named by a working order's pair, else against USD; cash is none");
    }

    /// A sync reads the account, then stores what it read: a delivery that recorded an order meanwhile (its
    /// commit queued behind the sync's) was overwritten in memory by the state read before the broker had it,
    /// so a CANCEL or MODIFY of that order found none until the next sync.
    #[tokio::test]
    async fn a_synced_state_does_not_replace_one_a_delivery_changed_meanwhile() {
        let (dir, store, app) = crate::app::tests::temp_app("sync-cas");
        let old = BotState::default();
        let synced = BotState { next_id: 7, ..BotState::default() };
        let mut delivered = BotState::default();
        delivered.working_orders.push(OrderRec {
            id: "X".into(),
            instrument: "AAPL".into(),
            direction: "long".into(),
            intent: "entry".into(),
            order_type: "limit".into(),
            price: Some(d("190")),
            quantity: d("10"),
            size_known: true,
            notional: None,
            filled: d("0"),
            duration: "day".into(),
            state: "open".into(),
            legs: Vec::new(),
        });
        // The delivery's order is recorded while the sync's state is being stored.
        app.set_bot_state("s", "b", delivered.clone());
        let lease = app.leases.take("s", "b").await.unwrap().expect("one server: granted");
        assert_eq!(store_synced(&app, "s", "b", &lease, &old, synced.clone()).await.unwrap(), Some(false));
        assert_eq!(app.bot_state("s", "b"), delivered, "the delivery's order stays");
        // Unchanged meanwhile: the synced state is taken.
        assert_eq!(store_synced(&app, "s", "b", &lease, &delivered, synced.clone()).await.unwrap(), Some(true));
        assert_eq!(app.bot_state("s", "b"), synced);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A broker on loopback that answers a bot's reads with its recorded fixtures: the positions for the positions
    /// request of either of `accounts`, the working orders for any other read, the first of these held until
    /// `release` is notified (a read still out). Its port, and the paths it was asked.
    async fn fixture_broker(
        broker: strategy_webhook::broker::BrokerId,
        accounts: [&str; 2],
        release: Arc<Notify>,
    ) -> (u16, Arc<Mutex<Vec<String>>>) {
        let fixture = |file: &str| {
            let path =
                format!("{}/../../tests/fixtures/brokers/{}/{file}", env!("CARGO_MANIFEST_DIR"), broker.as_str());
            Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
        };
        let (positions, orders) = (fixture("positions.json"), fixture("orders_open.json"));
        let positions_paths: Vec<String> =
            accounts.iter().map(|a| broker.broker().positions_request(a).unwrap().path.to_string()).collect();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let held = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::clone(&asked);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (seen, held, release) = (Arc::clone(&seen), Arc::clone(&held), Arc::clone(&release));
                let (positions, orders, positions_paths) = (positions.clone(), orders.clone(), positions_paths.clone());
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let path = req.uri().path_and_query().map_or_else(String::new, |p| p.as_str().to_owned());
                    seen.lock().unwrap().push(path.clone());
                    let (held, release) = (Arc::clone(&held), Arc::clone(&release));
                    let body = if positions_paths.contains(&path) { positions.clone() } else { orders.clone() };
                    let first_list = !positions_paths.contains(&path);
                    async move {
                        if first_list && held.swap(false, std::sync::atomic::Ordering::SeqCst) {
                            release.notified().await;
                        }
                        let mut res = hyper::Response::new(http_body_util::Full::new(body));
                        res.headers_mut().insert("content-type", "application/json".parse().unwrap());
                        Ok::<_, std::convert::Infallible>(res)
                    }
                });
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
                });
            }
        });
        (port, asked)
    }

    /// A broker on loopback that answers with its recorded fixtures: the positions for the positions request, and
    /// once `armed`, order `x` fills right after that answer; order `x` by its id as working (`order_by_id`) until
    /// then and filled (`order_filled`) after; the working-order list, which does not hold `x`, for anything else.
    async fn filling_broker(
        broker: strategy_webhook::broker::BrokerId,
        account: &str,
        x: &str,
        armed: Arc<std::sync::atomic::AtomicBool>,
    ) -> u16 {
        use std::sync::atomic::Ordering::SeqCst;
        let fixture = |file: &str| {
            let path =
                format!("{}/../../tests/fixtures/brokers/{}/{file}", env!("CARGO_MANIFEST_DIR"), broker.as_str());
            Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
        };
        let (positions, list) = (fixture("positions.json"), fixture("orders_open.json"));
        let (working, filled_order) = (fixture("order_by_id.json"), fixture("order_filled.json"));
        let positions_path = broker.broker().positions_request(account).unwrap().path.to_string();
        let x_path = broker.broker().order_request(account, x).unwrap().path.to_string();
        let filled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (armed, filled) = (Arc::clone(&armed), Arc::clone(&filled));
                let (positions, list, working, filled_order) =
                    (positions.clone(), list.clone(), working.clone(), filled_order.clone());
                let (positions_path, x_path) = (positions_path.clone(), x_path.clone());
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let path = req.uri().path_and_query().map_or_else(String::new, |p| p.as_str().to_owned());
                    let body = if path == positions_path {
                        if armed.load(SeqCst) {
                            filled.store(true, SeqCst);
                        }
                        positions.clone()
                    } else if path == x_path {
                        if filled.load(SeqCst) {
                            filled_order.clone()
                        } else {
                            working.clone()
                        }
                    } else {
                        list.clone()
                    };
                    async move {
                        let mut res = hyper::Response::new(http_body_util::Full::new(body));
                        res.headers_mut().insert("content-type", "application/json".parse().unwrap());
                        Ok::<_, std::convert::Infallible>(res)
                    }
                });
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
                });
            }
        });
        port
    }

    /// The demo's bot whose broker names accounts, delivered over http to a [`filling_broker`] (order `x`, `armed`):
    /// the App's directory, its store, the App, the strategy's id and the bot's.
    async fn at_filling_broker(
        name: &str,
        x: &str,
        armed: Arc<std::sync::atomic::AtomicBool>,
    ) -> (std::path::PathBuf, crate::store::Store, Arc<App>, String, String) {
        let (dir, store, app) = crate::app::tests::temp_app(name);
        let demo = &crate::app::tests::own_token_demo();
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        let cfg = s.bots.iter().find(|b| b.broker.broker().names_account()).unwrap();
        let (bot, account, broker) = (cfg.id.to_string(), cfg.account_id.clone(), cfg.broker);
        let port = filling_broker(broker, &account, x, armed).await;
        let file = format!(r#"{{"{bot}": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = Arc::new(app.with_bots(crate::bots::Bots::from_json(file.as_bytes(), &dir).unwrap()));
        let id = app.apply_snapshot(demo.as_bytes()).unwrap();
        (dir, store, app, id, bot)
    }

    /// A working order the broker's list does not show (listed late, or a GTC order older than the list reaches)
    /// was read back by its id after the positions: an exit that filled between the two reads was dropped as
    /// filled while the shares it sold were still held, and a CLOSE sold them a second time. The read-back comes
    /// before the positions now, so such an order is in both reads, never in neither.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_order_read_back_by_its_id_is_read_before_the_positions() {
        let x = "900000000001";
        let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (dir, store, app, id, bot) = at_filling_broker("sync-read-back-first", x, Arc::clone(&armed)).await;
        let lease = app.leases.take(&id, &bot).await.unwrap().unwrap();
        sync_now(&app, &id, &bot, &lease).await.unwrap();
        // The bot as an exit's delivery leaves it: the position, and the exit x resting for all of it.
        let mut held = app.bot_state(&id, &bot);
        let p = held.positions.first().cloned().expect("the sync read a position");
        held.working_orders.push(OrderRec {
            id: x.into(),
            instrument: p.instrument.clone(),
            direction: p.direction.clone(),
            intent: "exit".into(),
            order_type: "limit".into(),
            price: Some(d("999")),
            quantity: p.quantity,
            size_known: true,
            notional: None,
            filled: d("0"),
            duration: "gtc".into(),
            state: "open".into(),
            legs: Vec::new(),
        });
        app.set_bot_state(&id, &bot, held);
        armed.store(true, std::sync::atomic::Ordering::SeqCst);
        sync_now(&app, &id, &bot, &lease).await.unwrap();
        lease.give_back().await;
        let st = app.bot_state(&id, &bot);
        let holds = st.positions.iter().any(|q| q.instrument == p.instrument && q.direction == p.direction);
        let exit = st.working_orders.iter().any(|o| o.id == x);
        assert!(holds && exit, "the position and the exit that sells it, both or neither: {st:?}");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A delivery sets the bot's state in memory before its commit is queued; a sync that read the account and
    /// stored its state meanwhile was written first and the delivery's older state last. Memory held the sync's
    /// state, the database the delivery's, and every later sync finding the broker as memory had it stored
    /// nothing: a restart decided from the older state. The sync waits for the delivery's commit first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sync_waits_for_a_deliverys_state_to_be_committed_before_storing_its_own() {
        let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (dir, store, app, id, bot) = at_filling_broker("sync-committing", "900000000002", armed).await;
        // A delivery recorded an order in memory; its commit lands a moment later.
        let delivered = BotState { next_id: 41, ..BotState::default() };
        app.set_bot_state_committing(&id, &bot, delivered.clone());
        let committer = {
            let (app, id, bot) = (Arc::clone(&app), id.clone(), bot.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                app.writer.bot_state(&id, &bot, serde_json::to_string(&delivered).unwrap()).await.unwrap();
                app.state_committed(&id, &bot, false);
            })
        };
        let lease = app.leases.take(&id, &bot).await.unwrap().unwrap();
        sync_now(&app, &id, &bot, &lease).await.unwrap();
        committer.await.unwrap();
        lease.give_back().await;
        let memory = app.bot_state(&id, &bot);
        assert!(!memory.positions.is_empty(), "the sync's state is the bot's: {memory:?}");
        let stored: BotState = serde_json::from_str(&app.reader.bot_state(&id, &bot).unwrap().unwrap()).unwrap();
        assert_eq!(stored, memory, "the database keeps another state than the bot's");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The state-age gauge was set only by an operator's `PUT …/state`: a bot synced from its broker had no series
    /// (or one that kept growing while its syncs succeeded), and a sync that stopped could not be seen on the
    /// dashboard. A sync sets it, whether the reads changed the state or not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_broker_sync_sets_the_state_age_gauge() {
        let (dir, store, app) = crate::app::tests::temp_app("sync-metric");
        let demo = &crate::app::tests::own_token_demo();
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        let cfg = s.bots.iter().find(|b| b.broker.broker().names_account()).unwrap();
        let (bot, account, broker) = (cfg.id.to_string(), cfg.account_id.clone(), cfg.broker);
        let release = Arc::new(Notify::new());
        release.notify_one();
        let (port, _) = fixture_broker(broker, [&account, &account], Arc::clone(&release)).await;
        let file = format!(r#"{{"{bot}": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = Arc::new(app.with_bots(crate::bots::Bots::from_json(file.as_bytes(), &dir).unwrap()));
        let id = app.apply_snapshot(demo.as_bytes()).unwrap();
        let lease = app.leases.take(&id, &bot).await.unwrap().unwrap();
        sync_now(&app, &id, &bot, &lease).await.unwrap();
        lease.give_back().await;
        assert!(!app.bot_state(&id, &bot).positions.is_empty(), "the sync read the account");
        let text = crate::metrics::render(&[], now_ms());
        let gauge = |l: &&str| {
            l.starts_with("swh_bot_state_age_seconds{") && l.contains(&format!("bot=\"{bot}\"")) && l.contains(&id)
        };
        assert!(text.lines().any(|l| gauge(&l)), "no state age for the synced bot:\n{text}");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A sync's reads of a bot's account were still out when its strategy was reloaded with another `account_id`:
    /// they came back after the reload had dropped the old account's state, found no state changed under them, and
    /// were taken (and stored) as the new account's, so that a CLOSE sent the old account's quantity to the new
    /// one. They describe the account named when they were sent: dropped, in memory and in the database, and the
    /// next sync reads the new account.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_of_the_old_account_ending_after_an_account_edit_are_not_the_new_accounts() {
        let (dir, store, app) = crate::app::tests::temp_app("sync-moved");
        let demo = &crate::app::tests::own_token_demo();
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        let cfg = s.bots.iter().find(|b| b.broker.broker().names_account()).unwrap();
        let (bot, old_account, broker) = (cfg.id.to_string(), cfg.account_id.clone(), cfg.broker);
        let new_account = "NEWACCOUNT0002";
        let release = Arc::new(Notify::new());
        let (port, asked) = fixture_broker(broker, [&old_account, new_account], Arc::clone(&release)).await;
        let file = format!(r#"{{"{bot}": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = Arc::new(app.with_bots(crate::bots::Bots::from_json(file.as_bytes(), &dir).unwrap()));
        let id = app.apply_snapshot(demo.as_bytes()).unwrap();
        let sync = |app: Arc<App>| {
            let (id, bot) = (id.clone(), bot.clone());
            async move {
                let lease = app.leases.take(&id, &bot).await.unwrap().expect("the embedded store grants every lease");
                let read = sync_now(&app, &id, &bot, &lease).await;
                lease.give_back().await;
                read
            }
        };
        // A sync of the old account, its working orders' list held at the broker; the account is edited meanwhile.
        let reading = tokio::spawn(sync(Arc::clone(&app)));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while asked.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "the sync never read the account");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        app.apply_snapshot(demo.replace(&old_account, new_account).as_bytes()).unwrap();
        release.notify_one();
        reading.await.unwrap().unwrap();
        let st = app.bot_state(&id, &bot);
        assert!(st.positions.is_empty() && st.working_orders.is_empty(), "the old account's state was taken: {st:?}");
        let live = app.engine.strategy(&id).unwrap();
        let held = live.bots.iter().find(|b| *b.id == *bot).unwrap();
        assert!(held.positions.is_empty() && held.working_orders.is_empty(), "decided against the old account's");
        assert_eq!(app.reader.bot_state(&id, &bot).unwrap(), None, "stored for the next start");
        // The next sync (the one the reload asked for) reads the new account, and its state says so.
        sync(Arc::clone(&app)).await.unwrap();
        let st = app.bot_state(&id, &bot);
        assert_eq!(st.source.as_ref().map(|s| s.account.as_str()), Some(new_account), "{st:?}");
        assert!(!st.positions.is_empty(), "the new account's positions: {st:?}");
        let new_positions = broker.broker().positions_request(new_account).unwrap().path.to_string();
        assert!(asked.lock().unwrap().contains(&new_positions), "{:?}", asked.lock().unwrap());
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Leg quantities whose quotient is out of Decimal's range panicked the bot's sync task, which then stayed
    /// dead, its state frozen without a warning.
    #[test]
    fn legs_of_quantities_far_apart_are_read_without_panicking() {
        let s = spx_strategy();
        let positions = [
            position("SPXW260320C05800000", AssetClass::Option, true, "8"),
            position("SPXW260320C05850000", AssetClass::Option, false, "0.0000000000000000000000000001"),
        ];
        let st = to_state(&s, &positions, &[]);
        let ratios: Vec<u32> = st.positions[0].legs.iter().map(|l| l.ratio).collect();
        assert_eq!(ratios, [1, 1]);
    }

    #[test]
    fn option_contracts_on_one_underlying_become_one_position_with_its_legs() {
        let s = spx_strategy();
        let positions = [
            position("SPXW260320C05800000", AssetClass::Option, true, "2"),
            position("SPXW260320C05850000", AssetClass::Option, false, "2"),
            position("AAPL", AssetClass::Equity, true, "10"),
        ];
        let mut spread = order("9", "SPX", AssetClass::Option, OrderSide::Buy, "1");
        spread.side = None;
        spread.price_effect = Some(PriceEffect::Debit);
        spread.legs = vec![
            spread_leg("SPXW260320C05800000", LegAction::BuyToOpen),
            spread_leg("SPXW260320C05850000", LegAction::SellToOpen),
        ];
        let st = to_state(&s, &positions, &[spread]);
        assert_eq!(st.positions.len(), 1, "{:?}", st.positions);
        let p = &st.positions[0];
        assert_eq!((p.instrument.as_str(), p.direction.as_str(), p.quantity.to_string()), ("SPX", "long", "2".into()));
        let legs: Vec<(&str, &str, u32)> =
            p.legs.iter().map(|l| (l.symbol.as_str(), l.action.as_str(), l.ratio)).collect();
        assert_eq!(legs, [("SPXW260320C05800000", "buy_to_open", 1), ("SPXW260320C05850000", "sell_to_open", 1)]);
        // The working debit spread, with no side of its own, reads as a long entry from its legs.
        assert_eq!(st.working_orders.len(), 1, "{:?}", st.working_orders);
        let w = &st.working_orders[0];
        assert_eq!((w.instrument.as_str(), w.intent.as_str(), w.direction.as_str()), ("SPX", "entry", "long"));
        assert_eq!(w.legs.len(), 2);
        st.to_core().expect("the snapshot takes the synced state");
    }

    /// A resting credit spread read back from its broker, then a MODIFY of its size alone: the new order is
    /// still a credit. Its price was stored as the broker's magnitude, which the snapshot reads as a debit, so
    /// the change went out as a debit at that price.
    #[test]
    fn a_working_credit_spread_read_back_stays_a_credit_through_a_modify() {
        let token = SPX_TOKEN;
        let s = spx_strategy();
        let mut spread = order("9", "SPX", AssetClass::Option, OrderSide::Sell, "1");
        spread.side = None;
        spread.limit_price = Some(d("1.20"));
        spread.price_effect = Some(PriceEffect::Credit);
        spread.legs = vec![
            spread_leg("SPXW260320C05800000", LegAction::SellToOpen),
            spread_leg("SPXW260320C05850000", LegAction::BuyToOpen),
        ];
        let mut unsaid = spread.clone();
        unsaid.order_id = "10".into();
        unsaid.price_effect = None;
        let st = to_state(&s, &[], &[spread.clone(), unsaid]);
        let prices: Vec<Option<Decimal>> = st.working_orders.iter().map(|o| o.price).collect();
        assert_eq!(prices, [Some(d("-1.20")), None], "signed net; none when the broker does not say");

        // The MODIFY's request from the synced state, against the same working order written by hand with its
        // net as a credit (negative) and as a debit.
        let modify = |working: Vec<strategy_webhook::strategy::WorkingOrder>| {
            let mut s = s.clone();
            s.bots[0].working_orders = working;
            let e = strategy_webhook::Engine::new();
            e.upsert(s).unwrap();
            let body = r#"{"ticker":"SPX","action":"modify","direction":"short","quantity":"3"}"#;
            let o = e.deliver(token.as_bytes(), body.as_bytes(), Some("application/json"), 1_774_000_000_000);
            // The changed order (a replace, or a cancel and a new order where the size cannot change in place).
            let last = o.orders.last().unwrap_or_else(|| panic!("{}", o.to_json()));
            (last.order.price_effect, String::from_utf8_lossy(last.request.body.as_bytes()).into_owned())
        };
        let (_, synced) = to_state(&s, &[], &[spread]).to_core().unwrap();
        let by_hand = |price: &str| {
            let mut w = synced.clone();
            w[0].price = Some(d(price));
            w
        };
        let sent = modify(synced.clone());
        assert_eq!(sent.0, Some(PriceEffect::Credit), "{}", sent.1);
        assert_eq!(sent, modify(by_hand("-1.20")), "sent as the credit it is");
        assert_ne!(sent.1, modify(by_hand("1.20")).1, "not as a debit");
    }

    #[test]
    fn crypto_balances_become_the_strategys_pairs_and_cash_is_no_position() {
        let s = strategy(|v| {
            v["asset_class"] = serde_json::json!("crypto");
            v["duration"] = serde_json::json!("gtc");
            v["allowed_instruments"] = serde_json::json!(["BTC/USD", "DOGE-USD"]);
            v["market"] = serde_json::json!({});
        });
        let positions = [
            position("BTC", AssetClass::Crypto, true, "0.05"),
            position("DOGE", AssetClass::Crypto, true, "1500"),
            position("USD", AssetClass::Crypto, true, "1234.56"),
            position("ETH", AssetClass::Crypto, true, "2"),
        ];
        let orders = [order("x", "BTC-USD", AssetClass::Crypto, OrderSide::Sell, "0.02")];
        let st = to_state(&s, &positions, &orders);
        let mut held: Vec<&str> = st.positions.iter().map(|p| p.instrument.as_str()).collect();
        held.sort_unstable();
        assert_eq!(held, ["BTC/USD", "DOGE/USD"]);
        let sell = st.working_orders.iter().find(|o| o.instrument == "BTC/USD").unwrap();
        assert_eq!((sell.intent.as_str(), sell.direction.as_str()), ("exit", "long"), "a sell against a held coin");
        st.to_core().expect("the snapshot takes the synced state");
    }

    /// A stablecoin wallet is a position of a strategy trading it as a base (USDT/USD), and cash to one pricing its
    /// pairs in it (BTC/USDT), or trading any pair.
    #[test]
    fn a_stablecoin_is_held_where_it_is_a_pairs_base_and_cash_elsewhere() {
        let crypto = |pairs: serde_json::Value| {
            strategy(|v| {
                v["asset_class"] = serde_json::json!("crypto");
                v["duration"] = serde_json::json!("gtc");
                v["allowed_instruments"] = pairs;
                v["market"] = serde_json::json!({});
            })
        };
        let wallet = [position("USDT", AssetClass::Crypto, true, "2500")];
        let held = |s: &Strategy| -> Vec<String> {
            to_state(s, &wallet, &[]).positions.iter().map(|p| format!("{} {}", p.instrument, p.quantity)).collect()
        };
        assert_eq!(held(&crypto(serde_json::json!(["USDT/USD"]))), ["USDT/USD 2500"]);
        assert!(held(&crypto(serde_json::json!(["BTC/USDT"]))).is_empty());
        assert!(held(&crypto(serde_json::json!(["*"]))).is_empty());
    }

    /// A crypto position named by a pair (a broker listing BTC bought with USDT as `BTCUSD`) is its coin: a
    /// BTC/USDT strategy holds it (kept as BTC/USD, its CLOSE found nothing to close and its entry was sized as if
    /// flat), a strategy trading the named pair among others files it there, and one trading any pair keeps it as
    /// named (a stablecoin too).
    /// A coin read as a bare balance is held in each of the strategy's pairs of it: filed under the first only, a
    /// CLOSE through the second pair was rejected "no open position", the coins left held.
    #[test]
    fn a_coin_held_is_closed_through_either_pair_of_it() {
        let s = strategy(|v| {
            v["asset_class"] = serde_json::json!("crypto");
            v["duration"] = serde_json::json!("gtc");
            v["allowed_instruments"] = serde_json::json!(["BTC/USD", "BTC/USDT"]);
            v["market"] = serde_json::json!({});
            v["bots"] = serde_json::json!([{"id": "cb", "broker": strategy_webhook::BrokerId::ALL[0].as_str(),
                                            "account_id": "A1", "sizing": {"fixed_quantity": "0.01"}}]);
        });
        for (n, pair) in ["BTC/USD", "BTC/USDT"].into_iter().enumerate() {
            let st = to_state(&s, &[position("BTC", AssetClass::Crypto, true, "0.01")], &[]);
            let e = strategy_webhook::Engine::new();
            let mut live = s.clone();
            let (positions, orders) = st.to_core().unwrap();
            live.bots[0].positions = positions;
            live.bots[0].working_orders = orders;
            e.upsert(live).unwrap();
            let body = format!(r#"{{"ticker":"{pair}","action":"exit","sentiment":"flat"}}"#);
            let out = e.deliver(
                SPX_TOKEN.as_bytes(),
                body.as_bytes(),
                Some("application/json"),
                1_774_000_000_000 + n as i64,
            );
            assert_eq!(out.orders.len(), 1, "{pair}: {:?}", out.logs);
        }
    }

    #[test]
    fn a_position_named_by_a_pair_is_its_coin_in_the_strategys_pair() {
        let positions = [
            position("BTC/USD", AssetClass::Crypto, true, "0.25"),
            position("USDT/USD", AssetClass::Crypto, true, "100"),
        ];
        for (allowed, want) in [
            (serde_json::json!(["BTC/USDT"]), vec!["BTC/USDT"]),
            // Held in each of the strategy's pairs of the coin: a CLOSE of either finds it.
            (serde_json::json!(["BTC/USDT", "BTC/USD"]), vec!["BTC/USDT", "BTC/USD"]),
            (serde_json::json!(["BTC/USD", "BTC/USDT"]), vec!["BTC/USD", "BTC/USDT"]),
            (serde_json::json!(["ETH/USD"]), vec![]),
            (serde_json::json!(["*"]), vec!["BTC/USD", "USDT/USD"]),
        ] {
            let s = strategy(|v| {
                v["asset_class"] = serde_json::json!("crypto");
                v["duration"] = serde_json::json!("gtc");
                v["allowed_instruments"] = allowed.clone();
                v["market"] = serde_json::json!({});
            });
            let st = to_state(&s, &positions, &[]);
            let held: Vec<&str> = st.positions.iter().map(|p| p.instrument.as_str()).collect();
            assert_eq!(held, want, "{allowed}");
        }
    }

    /// A server answering each path with its own body, others with `default`.
    async fn path_broker(answers: Vec<(String, u16, String)>, default: String) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let answers = Arc::new(answers);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (answers, default) = (Arc::clone(&answers), default.clone());
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let path = req.uri().path_and_query().map_or_else(String::new, |p| p.as_str().to_owned());
                    let (status, body) = answers
                        .iter()
                        .find(|(p, _, _)| *p == path)
                        .map_or((200, default.clone()), |(_, s, b)| (*s, b.clone()));
                    async move {
                        let mut res = hyper::Response::new(http_body_util::Full::new(Bytes::from(body)));
                        *res.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                        res.headers_mut().insert("content-type", "application/json".parse().unwrap());
                        Ok::<_, std::convert::Infallible>(res)
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        port
    }

    /// One order as the broker that lists working orders only answers it.
    fn listed_order_json(id: &str, status: &str, qty: &str, filled: &str) -> String {
        serde_json::json!({"id": id, "client_order_id": format!("swh-{id}"),
            "created_at": "2026-03-03T14:31:05.118204Z", "submitted_at": "2026-03-03T14:31:05.112838Z",
            "symbol": "AAPL", "asset_class": "us_equity", "qty": qty, "filled_qty": filled,
            "order_class": "simple", "order_type": "limit", "type": "limit", "side": "sell",
            "position_intent": "sell_to_close", "time_in_force": "day", "limit_price": "200",
            "status": status, "legs": null})
        .to_string()
    }

    /// A replace the broker gave up (the old order filled in part first, the new one refused) at a broker that lists
    /// working orders only: the new order is not listed but read back rejected, and the old one works on. Taken for
    /// a new order not listed yet, the old one was left out of the state for a minute.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_given_up_replace_read_back_keeps_the_old_order_working() {
        let (dir, store, app) = crate::app::tests::temp_app("sync-given-up");
        let demo = &crate::app::tests::own_token_demo();
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        let lists_open_only = strategy_webhook::broker::BrokerId::ALL
            .into_iter()
            .find(|b| b.broker().accepts_client_order_id() && !b.broker().replace_keeps_id());
        let cfg = s.bots.iter().find(|b| Some(b.broker) == lists_open_only).expect("a bot at that broker");
        let (bot, account, broker) = (cfg.id.to_string(), cfg.account_id.clone(), cfg.broker.broker());
        let (old_id, new_id) = ("0000000a-old0-0000-0000-000000000001", "0000000b-new0-0000-0000-000000000002");
        let port = path_broker(
            vec![
                (
                    broker.open_orders_request(&account, now_ms()).unwrap().path.to_string(),
                    200,
                    format!("[{}]", listed_order_json(old_id, "partially_filled", "10", "4")),
                ),
                (
                    broker.positions_request(&account).unwrap().path.to_string(),
                    200,
                    r#"[{"symbol":"AAPL","asset_class":"us_equity","qty":"6","side":"long","avg_entry_price":"190"}]"#
                        .into(),
                ),
                (
                    broker.order_request(&account, new_id).unwrap().path.to_string(),
                    200,
                    listed_order_json(new_id, "rejected", "10", "0"),
                ),
            ],
            "[]".into(),
        )
        .await;
        let file = format!(r#"{{"{bot}": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = Arc::new(app.with_bots(crate::bots::Bots::from_json(file.as_bytes(), &dir).unwrap()));
        let id = app.apply_snapshot(demo.as_bytes()).unwrap();
        // As the MODIFY's delivery left the bot: the exit under the new id, and the note old -> new.
        let mut st = BotState { source: app.state_source(&id, &bot), ..BotState::default() };
        st.positions.push(PositionRec {
            instrument: "AAPL".into(),
            direction: "long".into(),
            quantity: d("10"),
            avg_price: None,
            legs: Vec::new(),
        });
        st.working_orders.push(OrderRec {
            id: new_id.into(),
            instrument: "AAPL".into(),
            direction: "long".into(),
            intent: "exit".into(),
            order_type: "limit".into(),
            price: Some(d("200")),
            quantity: d("10"),
            size_known: true,
            notional: None,
            filled: d("0"),
            duration: "day".into(),
            state: "open".into(),
            legs: Vec::new(),
        });
        st.replaced.push(crate::paper::Replaced { old: old_id.into(), new: new_id.into(), at_ms: now_ms() });
        app.set_bot_state(&id, &bot, st);
        let lease = app.leases.take(&id, &bot).await.unwrap().unwrap();
        sync_now(&app, &id, &bot, &lease).await.unwrap();
        lease.give_back().await;
        let after = app.bot_state(&id, &bot);
        let working: Vec<&str> = after.working_orders.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(working, [old_id], "the new order read back rejected, the old one listed working: {after:?}");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A Tradier answer to the positions read that names no positions (`{}`, or an Apigee fault in a
    /// 200) is not "flat": it says nothing of the account. Read as flat, the sync dropped the bot's position, and
    /// the next entry was decided as if flat (a second entry beside the first) and a CLOSE found nothing to close.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_naming_no_positions_leaves_the_state_as_it_was() {
        let (dir, store, app) = crate::app::tests::temp_app("read-naming-no-positions");
        // The broker that writes "no orders" as the string "null" (Tradier), found by what it reads: the server's
        // source names no broker (tests/layers.rs).
        let id = strategy_webhook::broker::BrokerId::ALL
            .into_iter()
            .find(|b| {
                b.broker().offers(AssetClass::Equity)
                    && b.broker().parse_orders(br#"{"orders":"null"}"#).is_ok_and(|o| o.is_empty())
            })
            .unwrap();
        // The demo's second bot, moved to that broker.
        let mut v: serde_json::Value = serde_json::from_str(&crate::app::tests::own_token_demo()).unwrap();
        v["bots"][1]["broker"] = id.as_str().into();
        v["bots"][1]["account_id"] = "VA12345678".into();
        let demo = v.to_string();
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        let cfg = &s.bots[1];
        assert_eq!(cfg.broker.broker().name(), id.as_str());
        let (bot, account, broker) = (cfg.id.to_string(), cfg.account_id.clone(), cfg.broker.broker());
        let port = path_broker(
            vec![
                (broker.positions_request(&account).unwrap().path.to_string(), 200, "{}".into()),
                (
                    broker.open_orders_request(&account, now_ms()).unwrap().path.to_string(),
                    200,
                    r#"{"orders":"null"}"#.into(),
                ),
            ],
            "{}".into(),
        )
        .await;
        let file = format!(r#"{{"{bot}": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = Arc::new(app.with_bots(crate::bots::Bots::from_json(file.as_bytes(), &dir).unwrap()));
        let id = app.apply_snapshot(demo.as_bytes()).unwrap();
        let mut st = BotState { source: app.state_source(&id, &bot), ..BotState::default() };
        st.positions.push(PositionRec {
            instrument: "AAPL".into(),
            direction: "long".into(),
            quantity: d("10"),
            avg_price: None,
            legs: Vec::new(),
        });
        app.set_bot_state(&id, &bot, st.clone());
        let lease = app.leases.take(&id, &bot).await.unwrap().unwrap();
        let read = sync_now(&app, &id, &bot, &lease).await;
        lease.give_back().await;
        let after = app.bot_state(&id, &bot);
        assert_eq!(after.positions, st.positions, "the sync ({read:?}) read an answer naming no positions as flat");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A broker on loopback that answers every request with `answer(path)` as JSON, and the paths it was asked, in
    /// order.
    async fn recording_broker(answer: fn(&str) -> &'static [u8]) -> (u16, Arc<Mutex<Vec<String>>>) {
        let asked = Arc::new(Mutex::new(Vec::<String>::new()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::clone(&asked);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let seen = Arc::clone(&seen);
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let path = req.uri().path_and_query().map_or_else(String::new, |p| p.as_str().to_owned());
                    let body = Bytes::from_static(answer(&path));
                    seen.lock().unwrap().push(path);
                    async move {
                        let mut res = hyper::Response::new(http_body_util::Full::new(body));
                        res.headers_mut().insert("content-type", "application/json".parse().unwrap());
                        Ok::<_, std::convert::Infallible>(res)
                    }
                });
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
                });
            }
        });
        (port, asked)
    }

    /// A bot's `symbols` map written in another spelling of the pair than the allowed instrument (`BTCUSD` for
    /// `BTC/USD`) sends every order to the mapped product (the orders read the map in any spelling); the product's
    /// increments are read for that product too. Read as text, they were read for the unmapped pair, and the orders
    /// were sized and priced in another product's steps.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn increments_are_read_for_the_product_the_orders_go_to_in_any_spelling_of_the_map() {
        let (dir, store, app) = crate::app::tests::temp_app("increments-mapped");
        let (port, asked) =
            recording_broker(|_| br#"{"base_increment":"0.0001","quote_increment":"0.01","price_increment":"0.01"}"#)
                .await;
        // A broker whose products are read (picked by what it does: the server names no broker).
        let mapped = CryptoPair::parse("BTC-USDC").unwrap();
        let broker = strategy_webhook::broker::BrokerId::ALL
            .into_iter()
            .find(|b| b.broker().product_request(&mapped).is_some())
            .expect("a broker whose product increments are read");
        let snapshot = serde_json::json!({
            "id": "btc", "token_hash": "f".repeat(64), "status": "active", "asset_class": "crypto",
            "order_type": "limit", "duration": "gtc", "allowed_instruments": ["BTC/USD"],
            "bots": [{"id": "cb", "broker": broker.as_str(), "account_id": "default",
                      "sizing": {"fixed_quantity": "0.001"}, "symbols": {"BTCUSD": "BTC-USDC"}}]
        })
        .to_string();
        let file = format!(r#"{{"cb": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = Arc::new(app.with_bots(crate::bots::Bots::from_json(file.as_bytes(), &dir).unwrap()));
        let id = app.apply_snapshot(snapshot.as_bytes()).unwrap();
        let o = app.engine.deliver(
            "f".repeat(64).as_bytes(),
            br#"{"ticker":"BTC/USD","action":"OPEN","direction":"long","price":"65000"}"#,
            Some("application/json"),
            1_705_676_400_000,
        );
        assert_eq!(o.orders[0].order.symbol, "BTC-USDC", "the orders go to the mapped product");
        read_increments(&app, &id, "cb", true).await.unwrap();
        let want = broker.broker().product_request(&mapped).unwrap().path.to_string();
        assert_eq!(asked.lock().unwrap().clone(), [want], "the increments of the product the orders go to");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A read a delivery asked for that took longer than the follow-up's delay still gets its follow-up, counted from
    /// its end; the follow-up read itself asks for none, and a pending one waits for its time.
    #[test]
    fn a_slow_poked_read_still_gets_its_follow_up() {
        let poke = tokio::time::Instant::now();
        // The poked read ended 2.5 s after the poke (a slow broker): its follow-up is 2 s after that.
        let ended = poke + Duration::from_millis(2_500);
        assert_eq!(next_follow_up(true, None, ended), Some(ended + FOLLOW_UP));
        // The follow-up read, at its time: nothing more.
        assert_eq!(next_follow_up(false, Some(ended + FOLLOW_UP), ended + FOLLOW_UP), None);
        // An interval's read before it: it stays due.
        let early = ended + Duration::from_millis(500);
        assert_eq!(next_follow_up(false, Some(ended + FOLLOW_UP), early), Some(ended + FOLLOW_UP));
    }

    /// A pair added to a running strategy (its file edited to allow DOGE-USD beside BTC-USD) had its product
    /// increments read only when the hourly read came round: the bot's sync task read them at its start, and
    /// `increments_read` was not reset by the reload. For up to an hour DOGE orders kept the broker's 8 decimals
    /// (`base_size` 1234.56789012 where DOGE-USD trades in 0.1) and every one, a CLOSE's too, was refused by
    /// the broker after the sender heard processed. A pair the bot has no increments for is read at the next sync.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pair_added_by_a_reload_has_its_increments_read_at_the_next_sync() {
        let (dir, store, app) = crate::app::tests::temp_app("increments-reload");
        let (port, asked) = recording_broker(|path| {
            if path.contains("/products/") {
                br#"{"base_increment":"0.1","quote_increment":"0.00001","price_increment":"0.00001"}"#
            } else {
                br#"{"accounts":[],"orders":[],"has_next":false,"cursor":""}"#
            }
        })
        .await;
        // A broker whose products are read (picked by what it does: the server names no broker).
        let doge = CryptoPair::parse("DOGE-USD").unwrap();
        let broker = strategy_webhook::broker::BrokerId::ALL
            .into_iter()
            .find(|b| b.broker().product_request(&doge).is_some())
            .expect("a broker whose product increments are read");
        let snapshot = |pairs: serde_json::Value| {
            serde_json::json!({
                "id": "coins", "token_hash": "e".repeat(64), "status": "active", "asset_class": "crypto",
                "order_type": "limit", "duration": "gtc", "allowed_instruments": pairs,
                "bots": [{"id": "cb", "broker": broker.as_str(), "account_id": "default",
                          "sizing": {"fixed_quantity": "1234.56789012"}}]
            })
            .to_string()
        };
        let file = format!(
            r#"{{"cb": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}", "sync_interval_secs": 1}}}}"#
        );
        let app = Arc::new(app.with_bots(crate::bots::Bots::from_json(file.as_bytes(), &dir).unwrap()));
        let id = app.apply_snapshot(snapshot(serde_json::json!(["BTC-USD"])).as_bytes()).unwrap();
        app.sync.ensure(&app, &id, "cb");
        let product =
            |p: &str| broker.broker().product_request(&CryptoPair::parse(p).unwrap()).unwrap().path.to_string();
        let asked_for = |p: &str| asked.lock().unwrap().iter().any(|a| *a == product(p));
        for _ in 0..50 {
            if asked_for("BTC-USD") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(asked_for("BTC-USD"), "the first pair's increments are read at the start");
        // The file edited: DOGE-USD allowed too.
        app.apply_snapshot(snapshot(serde_json::json!(["BTC-USD", "DOGE-USD"])).as_bytes()).unwrap();
        for _ in 0..60 {
            if asked_for("DOGE-USD") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let read = app.bot_increments(&id, "cb");
        let all = asked.lock().unwrap().clone();
        let products: Vec<&String> = all.iter().filter(|a| a.contains("/products/")).collect();
        assert!(
            asked_for("DOGE-USD") && read.keys().any(|k| k.contains("DOGE")),
            "six seconds (six syncs) after the reload, DOGE-USD's increments are still not read: asked {products:?} in {} reads",
            all.len()
        );
        // And so a DOGE entry goes out in 8 decimals, off the product's 0.1 step.
        let o = app.engine.deliver(
            "e".repeat(64).as_bytes(),
            br#"{"ticker":"DOGEUSD","action":"buy","price":"0.18"}"#,
            Some("application/json"),
            1_705_676_400_000,
        );
        let bodies: Vec<String> =
            o.orders.iter().map(|r| String::from_utf8_lossy(r.request.body.as_bytes()).into_owned()).collect();
        assert!(bodies.iter().all(|b| !b.contains("1234.56789012")), "{bodies:?}");
        app.sync.forget(&id, "cb");
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }
}
