//! Read your own writes: an alert is decided against a state read back after the entries this server sent.
//!
//! An accepted market entry is not written into its http bot's state: the sync reads it back from the broker
//! (a position once filled, a working order until then) a few hundred milliseconds after the delivery. A CLOSE
//! decided in between found nothing to close, was rejected, and the position the sender had closed stayed open;
//! so did an OPEN whose first attempt was still on its way when the CLOSE was decided.
//!
//! So each http bot's entries are marked here as they go out (their first attempt, while in flight) and once the
//! broker took them, and each completed read of the bot's account with the mark taken when it started. Before an
//! alert of a strategy is decided, [`ReadBack::enter`] pokes the sync of each of its bots with an entry newer than
//! its last completed read, and waits, bounded, for a read that started after it. An entry waiting for a retry
//! is not marked (the outbox's overtaken check deals with it), so a broker that is down costs later alerts nothing.
//!
//! Strategies with nothing to wait for pay one atomic load while no bot anywhere is marked. A strategy's alerts that
//! wait do so in the order they came, before their turn on the decision pool (no pool thread is held), and the
//! alerts that come after them queue behind them, so waiting reorders nothing.

use crate::app::{now_ms, App};
use crate::store::LogEntry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strategy_webhook::Level;

/// Default of `--read-back-wait-ms`: half of the 3 s after which TradingView gives up on a webhook, leaving the
/// decision, the commit and the answer the other half.
pub const DEFAULT_WAIT: Duration = Duration::from_millis(1500);

/// The marks of every http bot's entries and reads, and each strategy's queue of alerts waiting on them.
pub struct ReadBack {
    /// Orders marks: an entry's and a read's start, compared to tell whether a read started after an entry.
    seq: AtomicU64,
    /// Bots with something to wait for, plus alerts inside a gate: zero is the fast path of every alert.
    busy: AtomicUsize,
    inner: Mutex<Inner>,
    /// Bumped at each change of a mark, for the alerts waiting on one.
    changed: tokio::sync::watch::Sender<u64>,
    wait_ms: AtomicU64,
}

#[derive(Default)]
struct Inner {
    bots: HashMap<(String, String), Marks>,
    gates: HashMap<String, Gate>,
}

#[derive(Default, Clone)]
struct Marks {
    /// Entries handed off (their rows committed, or being committed) whose first attempt has not started, by client
    /// order id, each until it expires ([`QUEUED_FOR`]).
    queued: Vec<(String, Instant)>,
    /// First attempts of entries now on their way to the broker.
    in_flight: usize,
    /// The last entry the broker took.
    delivered: u64,
    /// The start of the last completed read of the account.
    read: u64,
    /// Whether [`ReadBack::busy`] counts this bot: pending when last looked at. A queued entry's mark stops
    /// counting when it expires, with nothing to tell, so the count follows what was last seen, not the clock.
    counted: bool,
}

impl Marks {
    fn pending(&self) -> bool {
        self.in_flight > 0 || self.delivered > self.read || !self.queued.is_empty()
    }

    /// Lets the queued entries' expired marks go.
    fn prune(&mut self, now: Instant) {
        self.queued.retain(|(_, until)| *until > now);
    }

    /// When the first of the queued entries' marks expires.
    fn expires(&self) -> Option<Instant> {
        self.queued.iter().map(|(_, until)| *until).min()
    }
}

/// How long an entry handed off counts before its first attempt starts: an alert decided after that is decided
/// without it. Twice the age past which a row's first attempt is checked against the alerts decided after it
/// (`dispatch::WAITED_MS`), so that an entry whose mark expired before it went out is always checked, and not sent if
/// a CLOSE decided without it overtook it.
pub const QUEUED_FOR: Duration = Duration::from_millis(2 * crate::dispatch::WAITED_MS.unsigned_abs());

struct Gate {
    /// Fair (first come, first served): the order of a strategy's alerts through the wait.
    queue: Arc<tokio::sync::Mutex<()>>,
    /// Alerts between [`ReadBack::enter`] and the end of their decision: a later one queues behind them even when
    /// nothing is left to wait for, or it could be decided first.
    inside: usize,
}

impl Default for ReadBack {
    fn default() -> Self {
        ReadBack {
            seq: AtomicU64::new(1),
            busy: AtomicUsize::new(0),
            inner: Mutex::default(),
            changed: tokio::sync::watch::channel(0).0,
            wait_ms: AtomicU64::new(u64::try_from(DEFAULT_WAIT.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// Held from an alert's [`ReadBack::enter`] until its decision has been made (and its hand-off begun).
pub struct Entered {
    _turn: tokio::sync::OwnedMutexGuard<()>,
    _inside: Inside,
}

/// An alert counted in its strategy's gate, from before it queues: a sender that hangs up while it waits drops it.
struct Inside {
    app: Arc<App>,
    strategy: String,
}

impl Drop for Inside {
    fn drop(&mut self) {
        let rb = &self.app.read_back;
        let mut inner = rb.lock();
        if let Some(g) = inner.gates.get_mut(&self.strategy) {
            g.inside = g.inside.saturating_sub(1);
            if g.inside == 0 {
                inner.gates.remove(&self.strategy);
            }
        }
        rb.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An entry's first attempt on its way to the broker, from before it is sent until its answer is marked.
pub struct InFlight<'a> {
    rb: &'a ReadBack,
    key: (String, String),
}

impl InFlight<'_> {
    /// The attempt is over: `taken` when the broker took the entry (so the account is to be read back after it).
    pub fn landed(self, taken: bool) {
        if taken {
            self.rb.delivered(&self.key.0, &self.key.1);
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.rb.update(&self.key.0, &self.key.1, |m| m.in_flight = m.in_flight.saturating_sub(1));
    }
}

impl ReadBack {
    /// Sets the longest an alert waits for its bots' reads (`--read-back-wait-ms`); zero waits for none.
    pub fn set_wait(&self, wait: Duration) {
        self.wait_ms.store(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::AcqRel)
    }

    /// Changes a bot's marks, keeping [`ReadBack::busy`] counting the bots with something to wait for.
    fn update(&self, strategy: &str, bot: &str, change: impl FnOnce(&mut Marks)) {
        let mut inner = self.lock();
        let key = (strategy.to_owned(), bot.to_owned());
        let marks = inner.bots.entry(key.clone()).or_default();
        change(marks);
        marks.prune(Instant::now());
        self.recount(&mut inner, key);
        drop(inner);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Keeps [`ReadBack::busy`] counting the bot `key` while it has something to wait for, and lets its marks go
    /// when it has none.
    fn recount(&self, inner: &mut Inner, key: (String, String)) {
        let Some(marks) = inner.bots.get_mut(&key) else { return };
        let now = marks.pending();
        match (marks.counted, now) {
            (false, true) => {
                self.busy.fetch_add(1, Ordering::AcqRel);
            }
            (true, false) => {
                self.busy.fetch_sub(1, Ordering::AcqRel);
            }
            _ => {}
        }
        marks.counted = now;
        if !now {
            // Nothing to wait for: the next entry starts from no read, which only asks for one after it.
            inner.bots.remove(&key);
        }
    }

    /// Lets every bot's expired queued marks go (they change nothing anyone waits on: a waiting alert wakes at the
    /// first expiry by itself).
    fn prune_all(&self, inner: &mut Inner) {
        let now = Instant::now();
        let expired: Vec<(String, String)> = inner
            .bots
            .iter_mut()
            .filter_map(|(k, m)| {
                let before = m.queued.len();
                m.prune(now);
                (m.queued.len() != before).then(|| k.clone())
            })
            .collect();
        for key in expired {
            self.recount(inner, key);
        }
    }

    /// An http bot's entry was handed off (its row is being committed, and will wait its turn in the bot's
    /// queue): the strategy's next alerts wait for its first attempt, and then for the read after it, for up to
    /// [`QUEUED_FOR`]. `coid` is the row's client order id.
    pub fn queued(&self, strategy: &str, bot: &str, coid: &str) {
        let until = Instant::now() + QUEUED_FOR;
        self.update(strategy, bot, |m| m.queued.push((coid.to_owned(), until)));
    }

    /// The row `coid` of the bot is done with before its first attempt (failed unsent, overtaken, expired, held
    /// back behind a cancel, or gone to its retries): it is waited for no more.
    pub fn unqueued(&self, strategy: &str, bot: &str, coid: &str) {
        let key = (strategy.to_owned(), bot.to_owned());
        let has = |inner: &Inner| inner.bots.get(&key).is_some_and(|m| m.queued.iter().any(|(c, _)| c == coid));
        // Most rows were never marked (exits, paper bots', another server's): nothing to do, nobody to wake.
        if !has(&self.lock()) {
            return;
        }
        self.update(strategy, bot, |m| m.queued.retain(|(c, _)| c != coid));
    }

    /// An entry's first attempt is about to go out to the bot's broker (its queued mark, if any, becomes the
    /// attempt's in one change, so that no alert finds the bot with nothing to wait for in between).
    pub fn sending(&self, strategy: &str, bot: &str, coid: &str) -> InFlight<'_> {
        self.update(strategy, bot, |m| {
            m.in_flight += 1;
            m.queued.retain(|(c, _)| c != coid);
        });
        InFlight { rb: self, key: (strategy.to_owned(), bot.to_owned()) }
    }

    /// The bot's broker took an entry (on any attempt, or found by a lookup).
    pub fn delivered(&self, strategy: &str, bot: &str) {
        let at = self.next();
        self.update(strategy, bot, |m| m.delivered = m.delivered.max(at));
    }

    /// Whether the bot has an entry the broker took since the start of its last completed read (a read is
    /// awaited: by this server's alerts, and on a shared database maybe by the others').
    pub fn awaits_read(&self, strategy: &str, bot: &str) -> bool {
        self.lock().bots.get(&(strategy.to_owned(), bot.to_owned())).is_some_and(|m| m.delivered > m.read)
    }

    /// A read of the bot's account starts: its mark, for [`ReadBack::read_done`].
    pub fn read_starting(&self) -> u64 {
        self.next()
    }

    /// A read of the bot's account that started at `started` has completed (its state is the bot's, or was
    /// found unchanged).
    pub fn read_done(&self, strategy: &str, bot: &str, started: u64) {
        // Most reads follow no entry of this server's: nothing to record, nobody to wake.
        if !self.lock().bots.contains_key(&(strategy.to_owned(), bot.to_owned())) {
            return;
        }
        self.update(strategy, bot, |m| m.read = m.read.max(started));
    }

    /// Before an alert of `strategy` is decided: `None` at once when nothing is to be waited for (nor is an
    /// earlier alert of the strategy still waiting or being decided); otherwise waits its turn among the
    /// strategy's waiting alerts and for its bots' reads, up to the bound. A bot whose read did not come within it
    /// is named in a WARN row of the strategy, and the alert is decided against the state as it stands.
    pub async fn enter(app: &Arc<App>, strategy: &str) -> Option<Entered> {
        let rb = &app.read_back;
        let elsewhere = held_elsewhere(app, strategy);
        if rb.busy.load(Ordering::Acquire) == 0 && elsewhere.is_empty() {
            return None;
        }
        let wait = Duration::from_millis(rb.wait_ms.load(Ordering::Relaxed));
        if wait.is_zero() {
            return None;
        }
        let deadline = tokio::time::Instant::now() + wait;
        let unread = unread_elsewhere(app, strategy, &elsewhere, deadline).await;
        let queue = {
            let mut inner = rb.lock();
            rb.prune_all(&mut inner);
            let waits = !unread.is_empty() || inner.bots.iter().any(|((s, _), m)| s == strategy && m.pending());
            let queued = inner.gates.get(strategy).is_some_and(|g| g.inside > 0);
            if !(waits || queued) {
                return None;
            }
            let g = inner.gates.entry(strategy.to_owned()).or_insert_with(|| Gate { queue: Arc::default(), inside: 0 });
            g.inside += 1;
            rb.busy.fetch_add(1, Ordering::AcqRel);
            Arc::clone(&g.queue)
        };
        let inside = Inside { app: Arc::clone(app), strategy: strategy.to_owned() };
        let entered = Entered { _turn: queue.lock_owned().await, _inside: inside };
        let mut late = rb.wait_for_reads(app, strategy, deadline).await;
        if !unread.is_empty() {
            late.extend(wait_elsewhere(app, strategy, &elsewhere, deadline).await);
        }
        for bot in late {
            let message = format!(
                "this alert was decided before bot {bot}'s broker was read back after its entry (waited {} ms): a \
                 position or working order that entry opened may be missing from the state it was decided against",
                wait.as_millis()
            );
            tracing::warn!(strategy, bot = %bot, "{message}");
            let row = LogEntry {
                ts_ms: now_ms(),
                strategy: strategy.to_owned(),
                decision: "processed",
                http_status: 200,
                alerts: "[]".into(),
                records: vec![(Level::Warn, message)],
            };
            app.writer.log(Some(row), None).await;
        }
        Some(entered)
    }

    /// Waits until no bot of `strategy` has an entry newer than its last completed read, poking their syncs, or
    /// until `deadline`: the bots still waited for then.
    async fn wait_for_reads(&self, app: &App, strategy: &str, deadline: tokio::time::Instant) -> Vec<String> {
        let mut changed = self.changed.subscribe();
        loop {
            let pending: Vec<(String, Marks)> = {
                let mut inner = self.lock();
                self.prune_all(&mut inner);
                inner
                    .bots
                    .iter()
                    .filter(|((s, _), m)| s == strategy && m.pending())
                    .map(|((_, b), m)| (b.clone(), m.clone()))
                    .collect()
            };
            if pending.is_empty() {
                return Vec::new();
            }
            for (bot, m) in &pending {
                // An entry still on its way (or waiting for its first attempt) is read back once it landed (its
                // delivery pokes the sync too).
                if m.in_flight == 0 && m.delivered > m.read {
                    app.sync.poke(strategy, bot);
                }
            }
            // Woken by a change of a mark, or by the first queued mark's expiry, which nothing announces.
            let expiry = pending.iter().filter_map(|(_, m)| m.expires()).min().map(tokio::time::Instant::from_std);
            let until = expiry.map_or(deadline, |e| e.min(deadline));
            if tokio::time::timeout_at(until, changed.changed()).await.is_err() && until == deadline {
                return pending.into_iter().map(|(b, _)| b).collect();
            }
        }
    }
}

/// On a shared database, the strategy's http bots: whichever server holds a bot's lease when its rows or its sync
/// come up delivers or reads (a lease is taken for the work and given back), so an entry of any of them may be
/// another server's, and is looked for in the database. This server's own deliveries are marked here as well.
fn held_elsewhere(app: &App, strategy: &str) -> Vec<String> {
    if app.shared.is_none() {
        return Vec::new();
    }
    let Some(s) = app.engine.strategy(strategy) else { return Vec::new() };
    s.bots
        .iter()
        .filter(|b| matches!(app.bots.get(&b.id), crate::bots::Delivery::Http(_)))
        .map(|b| b.id.to_string())
        .collect()
}

/// How far back the database is searched for another server's entries not yet read back: a bot whose reads keep
/// failing holds up its strategy's alerts (each for `--read-back-wait-ms`, with a WARN row) no longer than this.
const ELSEWHERE_HORIZON_MS: i64 = 60_000;

/// How often the database is asked again while an alert waits for another server's read.
const ELSEWHERE_POLL: Duration = Duration::from_millis(50);

/// The bots among `bots` with an entry another server may be about to send, or sent without a read of the account
/// since ([`crate::store::Reader::entries_unread`]). A failed read of the database waits for nothing, and one not
/// answered by `deadline` no longer: the batch that decides the alert reads it next, and answers its failure (a
/// PostgreSQL that hangs held the alert here, unbounded, before its batch's own time limits).
async fn unread_elsewhere(app: &App, strategy: &str, bots: &[String], deadline: tokio::time::Instant) -> Vec<String> {
    if bots.is_empty() {
        return Vec::new();
    }
    let (reader, s, b) = (app.reader.clone(), strategy.to_owned(), bots.to_vec());
    let queued = i64::try_from(QUEUED_FOR.as_millis()).unwrap_or(i64::MAX);
    let read =
        tokio::task::spawn_blocking(move || reader.entries_unread(&s, &b, now_ms(), queued, ELSEWHERE_HORIZON_MS));
    match tokio::time::timeout_at(deadline, read).await {
        Ok(Ok(Ok(unread))) => unread,
        Ok(Ok(Err(e))) => {
            tracing::warn!(strategy, error = %e, "looking for other servers' entries not yet read back failed");
            Vec::new()
        }
        Ok(Err(_)) => Vec::new(),
        Err(_) => {
            tracing::warn!(strategy, "looking for other servers' entries not yet read back took past the wait");
            Vec::new()
        }
    }
}

/// Waits until no bot among `bots` has another server's entry unread, asking the database every
/// [`ELSEWHERE_POLL`], or until `deadline`: the bots still waited for then.
async fn wait_elsewhere(app: &App, strategy: &str, bots: &[String], deadline: tokio::time::Instant) -> Vec<String> {
    loop {
        let unread = unread_elsewhere(app, strategy, bots, deadline).await;
        if unread.is_empty() || tokio::time::Instant::now() + ELSEWHERE_POLL > deadline {
            return unread;
        }
        tokio::time::sleep(ELSEWHERE_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::tests::{cancel_and_place_broker, next_request};
    use strategy_webhook::outcome::Decision;

    const TOKEN: &str = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

    /// How the mock broker answers.
    #[derive(Clone, Copy)]
    struct Mock {
        /// Before answering a new order.
        post_delay: Duration,
        /// Before answering a read of the account.
        get_delay: Duration,
        /// New orders answered 503 (taken by nobody).
        down: bool,
        /// MSFT shares held from the start.
        msft: u64,
    }

    /// What the broker was sent: `METHOD PATH`, and each new order's action and quantity.
    #[derive(Default)]
    struct Seen {
        requests: Vec<String>,
        orders: Vec<(String, u64)>,
        /// Each new order's symbol, beside `orders`.
        symbols: Vec<String>,
    }

    impl Seen {
        /// The shares of `symbol` the orders bought, less those they sold, from none.
        fn net(&self, symbol: &str) -> i64 {
            let signed =
                |(a, q): &(String, u64)| i64::try_from(*q).unwrap() * if a.starts_with("Buy") { 1 } else { -1 };
            self.orders.iter().zip(&self.symbols).filter(|(_, s)| *s == symbol).map(|(o, _)| signed(o)).sum()
        }
    }

    /// A broker on loopback whose orders fill at once (at the format of [`cancel_and_place_broker`]): it lists no
    /// working order and the net of its fills in each symbol (AAPL, MSFT) as its positions.
    async fn filling_broker(mock: Mock) -> (u16, Arc<Mutex<Seen>>) {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let held = Arc::new([AtomicU64::new(0), AtomicU64::new(mock.msft)]);
        let (seen_by_broker, next_id) = (Arc::clone(&seen), Arc::new(AtomicU64::new(2001)));
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (seen, held, next_id) = (Arc::clone(&seen_by_broker), Arc::clone(&held), Arc::clone(&next_id));
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some((first, body)) = next_request(&mut conn, &mut got).await {
                        let mut words = first.split(' ');
                        let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
                        seen.lock().unwrap().requests.push(format!("{method} {path}"));
                        let last = path.rsplit('/').next().unwrap_or_default().to_owned();
                        let (status, answer) = match method {
                            "POST" if mock.down => (503, r#"{"error":{"message":"unavailable"}}"#.to_owned()),
                            "POST" => {
                                tokio::time::sleep(mock.post_delay).await;
                                let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
                                let q = &sent["legs"][0]["quantity"];
                                let size = q.as_u64().or_else(|| q.as_str()?.parse().ok()).unwrap();
                                let action = sent["legs"][0]["action"].as_str().unwrap_or_default().to_owned();
                                let held = &held[usize::from(sent["legs"][0]["symbol"] == "MSFT")];
                                if action.starts_with("Buy") {
                                    held.fetch_add(size, Ordering::SeqCst);
                                } else {
                                    held.fetch_sub(size.min(held.load(Ordering::SeqCst)), Ordering::SeqCst);
                                }
                                let symbol = sent["legs"][0]["symbol"].as_str().unwrap_or_default().to_owned();
                                let mut seen = seen.lock().unwrap();
                                seen.orders.push((action, size));
                                seen.symbols.push(symbol);
                                drop(seen);
                                let id = next_id.fetch_add(1, Ordering::SeqCst);
                                (201, format!(r#"{{"data":{{"order":{{"id":{id},"status":"Received"}}}}}}"#))
                            }
                            "GET" => {
                                tokio::time::sleep(mock.get_delay).await;
                                let mut items = Vec::new();
                                for (symbol, held) in ["AAPL", "MSFT"].into_iter().zip(held.iter()) {
                                    let held = held.load(Ordering::SeqCst);
                                    if last == "positions" && held > 0 {
                                        items.push(format!(
                                            r#"{{"symbol":"{symbol}","instrument-type":"Equity","quantity":"{held}","quantity-direction":"Long","average-open-price":"190.0"}}"#
                                        ));
                                    }
                                }
                                let items = items.join(",");
                                (200, format!(r#"{{"data":{{"items":[{items}]}}}}"#))
                            }
                            _ => (404, "{}".to_owned()),
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
        (port, seen)
    }

    /// An order at [`late_broker`]: placed at `at`, filled `fill_after` later unless cancelled first.
    struct LateOrder {
        id: u64,
        action: String,
        size: u64,
        at: tokio::time::Instant,
        cancelled: bool,
        /// Whether a read of the working list has passed it over once (the broker lists it late).
        listed: bool,
    }

    /// What [`late_broker`] holds: its orders, and the shares they hold once filled.
    #[derive(Default)]
    struct Book {
        orders: Vec<LateOrder>,
    }

    impl Book {
        fn filled(o: &LateOrder, fill_after: Duration) -> bool {
            !o.cancelled && o.at.elapsed() >= fill_after
        }

        fn held(&self, fill_after: Duration) -> i64 {
            let signed =
                |o: &LateOrder| i64::try_from(o.size).unwrap() * if o.action.starts_with("Buy") { 1 } else { -1 };
            self.orders.iter().filter(|o| Self::filled(o, fill_after)).map(signed).sum()
        }

        fn working(&self, fill_after: Duration) -> usize {
            self.orders.iter().filter(|o| !o.cancelled && !Self::filled(o, fill_after)).count()
        }
    }

    /// A broker on loopback (at the format of [`cancel_and_place_broker`]) as brokers are right after a market order:
    /// a new order is left out of the first read of the working orders after it, and fills only `fill_after` after it
    /// was taken (unless cancelled first), the position showing from then on. An order read by its id is as it is.
    async fn late_broker(fill_after: Duration) -> (u16, Arc<Mutex<Book>>) {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let book = Arc::new(Mutex::new(Book::default()));
        let (book_of_broker, next_id) = (Arc::clone(&book), Arc::new(AtomicU64::new(3001)));
        let wire = move |o: &LateOrder| {
            let status = if o.cancelled {
                "Cancelled"
            } else if Book::filled(o, fill_after) {
                "Filled"
            } else {
                "Live"
            };
            let left = if status == "Live" { o.size } else { 0 };
            format!(
                r#"{{"id":{},"time-in-force":"Day","order-type":"Market","size":{},"underlying-symbol":"AAPL","underlying-instrument-type":"Equity","status":"{status}","legs":[{{"instrument-type":"Equity","symbol":"AAPL","quantity":{},"remaining-quantity":{left},"action":"{}"}}]}}"#,
                o.id, o.size, o.size, o.action
            )
        };
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (book, next_id) = (Arc::clone(&book_of_broker), Arc::clone(&next_id));
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some((first, body)) = next_request(&mut conn, &mut got).await {
                        let mut words = first.split(' ');
                        let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
                        let path = path.split('?').next().unwrap_or_default();
                        let last = path.rsplit('/').next().unwrap_or_default().to_owned();
                        let (status, answer) = {
                            let mut book = book.lock().unwrap();
                            match (method, last.parse::<u64>().ok()) {
                                ("POST", _) => {
                                    let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
                                    let q = &sent["legs"][0]["quantity"];
                                    let size = q.as_u64().or_else(|| q.as_str()?.parse().ok()).unwrap();
                                    let action = sent["legs"][0]["action"].as_str().unwrap_or_default().to_owned();
                                    let id = next_id.fetch_add(1, Ordering::SeqCst);
                                    let at = tokio::time::Instant::now();
                                    book.orders.push(LateOrder {
                                        id,
                                        action,
                                        size,
                                        at,
                                        cancelled: false,
                                        listed: false,
                                    });
                                    (201, format!(r#"{{"data":{{"order":{{"id":{id},"status":"Received"}}}}}}"#))
                                }
                                ("GET", Some(id)) => match book.orders.iter().find(|o| o.id == id) {
                                    Some(o) => (200, format!(r#"{{"data":{}}}"#, wire(o))),
                                    None => (404, r#"{"error":{"message":"not found"}}"#.to_owned()),
                                },
                                ("DELETE", Some(id)) => match book.orders.iter_mut().find(|o| o.id == id) {
                                    Some(o) if !o.cancelled && !Book::filled(o, fill_after) => {
                                        o.cancelled = true;
                                        (200, format!(r#"{{"data":{}}}"#, wire(o)))
                                    }
                                    _ => (422, r#"{"error":{"message":"order is not cancellable"}}"#.to_owned()),
                                },
                                ("GET", None) if last == "live" => {
                                    let mut items = Vec::new();
                                    for o in book.orders.iter_mut() {
                                        if !std::mem::replace(&mut o.listed, true) {
                                            continue;
                                        }
                                        if !o.cancelled && !Book::filled(o, fill_after) {
                                            items.push(wire(o));
                                        }
                                    }
                                    (200, format!(r#"{{"data":{{"items":[{}]}}}}"#, items.join(",")))
                                }
                                ("GET", None) => {
                                    let held = book.held(fill_after);
                                    let items = if held > 0 && last == "positions" {
                                        format!(
                                            r#"{{"symbol":"AAPL","instrument-type":"Equity","quantity":"{held}","quantity-direction":"Long","average-open-price":"190.0"}}"#
                                        )
                                    } else {
                                        String::new()
                                    };
                                    (200, format!(r#"{{"data":{{"items":[{items}]}}}}"#))
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
        (port, book)
    }

    /// The demo strategy with one http bot `tt` (10 shares a market order) at loopback `port`, and the demo itself
    /// on paper as `paper-only`, with their syncs started.
    async fn fixture(name: &str, port: u16) -> (std::path::PathBuf, crate::store::Store, Arc<App>) {
        let (dir, store, app) = crate::app::tests::temp_app(name);
        let file = format!(r#"{{"tt": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = Arc::new(app.with_bots(crate::bots::Bots::from_json(file.as_bytes(), &dir).unwrap()));
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        v["bots"] = serde_json::json!([{"id": "tt", "broker": cancel_and_place_broker().as_str(),
                                        "account_id": "5WT00001", "sizing": {"fixed_quantity": "10"}}]);
        v["token_hash"] = serde_json::json!(TOKEN);
        app.apply_snapshot(v.to_string().as_bytes()).unwrap();
        let mut p: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        p["id"] = serde_json::json!("paper-only");
        p["token_hash"] = serde_json::json!("e".repeat(64));
        app.apply_snapshot(p.to_string().as_bytes()).unwrap();
        crate::sync::Syncer::start(&app, crate::sync::STALE_AFTER);
        (dir, store, app)
    }

    /// What the webhook does with an alert of the demo: waits at the gate, decides, hands off, leaves the gate.
    async fn alert(app: &Arc<App>, token: &str, strategy: &str, body: &str) -> (Decision, String) {
        let entered = ReadBack::enter(app, strategy).await;
        let at = now_ms();
        let out = app.engine.deliver(token.as_bytes(), body.as_bytes(), Some("application/json"), at);
        let said = (out.decision, out.to_json());
        if out.decision == Decision::Processed {
            app.begin_hand_off(&tokio::runtime::Handle::current(), out, at, at).await.unwrap().unwrap();
        }
        drop(entered);
        said
    }

    async fn until(what: &str, within: Duration, done: impl Fn() -> bool) {
        let end = tokio::time::Instant::now() + within;
        while !done() {
            assert!(tokio::time::Instant::now() < end, "{what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for the sync's first read of the account, so that what follows starts from a read state.
    async fn first_read(seen: &Arc<Mutex<Seen>>) {
        until("the sync never read the account", Duration::from_secs(5), || {
            seen.lock().unwrap().requests.iter().any(|r| r.ends_with("/positions"))
        })
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    const OPEN: &str = r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#;
    const CLOSE: &str = r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#;

    /// An OPEN delivered (its market order filled at once), then a CLOSE decided before the read the delivery
    /// asked for was back (each read takes 200 ms): the CLOSE was decided against a state without the position,
    /// rejected "nothing to close", and the position stayed open at the broker. It waits for the read, and closes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_right_after_its_open_was_delivered_closes_the_position() {
        let mock = Mock { post_delay: Duration::ZERO, get_delay: Duration::from_millis(200), down: false, msft: 0 };
        let (port, seen) = filling_broker(mock).await;
        let (dir, store, app) = fixture("read-back-delivered", port).await;
        first_read(&seen).await;
        let (d, out) = alert(&app, TOKEN, "demo-equities", OPEN).await;
        assert_eq!(d, Decision::Processed, "{out}");
        until("the OPEN never reached the broker", Duration::from_secs(5), || !seen.lock().unwrap().orders.is_empty())
            .await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (d, out) = alert(&app, TOKEN, "demo-equities", CLOSE).await;
        assert_eq!(d, Decision::Processed, "the CLOSE was not processed: {out}");
        until("the close never reached the broker", Duration::from_secs(5), || seen.lock().unwrap().orders.len() > 1)
            .await;
        let orders = seen.lock().unwrap().orders.clone();
        assert_eq!(orders[1].1, 10, "the close sold what the entry filled: {orders:?}");
        assert!(orders[1].0.starts_with("Sell"), "{orders:?}");
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The OPEN's first attempt is still on its way (the broker answers new orders after 300 ms) when the CLOSE is
    /// decided: the entry went out after the CLOSE was rejected. The CLOSE waits for it and the read after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_while_its_open_is_in_flight_closes_the_position() {
        let mock =
            Mock { post_delay: Duration::from_millis(300), get_delay: Duration::from_millis(50), down: false, msft: 0 };
        let (port, seen) = filling_broker(mock).await;
        let (dir, store, app) = fixture("read-back-in-flight", port).await;
        first_read(&seen).await;
        let (d, out) = alert(&app, TOKEN, "demo-equities", OPEN).await;
        assert_eq!(d, Decision::Processed, "{out}");
        until("the OPEN never went out", Duration::from_secs(5), || {
            seen.lock().unwrap().requests.iter().any(|r| r.starts_with("POST"))
        })
        .await;
        assert!(seen.lock().unwrap().orders.is_empty(), "the OPEN was answered already");
        let (d, out) = alert(&app, TOKEN, "demo-equities", CLOSE).await;
        assert_eq!(d, Decision::Processed, "the CLOSE was not processed: {out}");
        until("the close never reached the broker", Duration::from_secs(5), || seen.lock().unwrap().orders.len() > 1)
            .await;
        let orders = seen.lock().unwrap().orders.clone();
        assert_eq!(orders[1], ("Sell to Close".to_owned(), 10), "{orders:?}");
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A broker whose reads hang: the CLOSE after a delivered OPEN waits the bound, no more, is decided against the
    /// state as it stands (the entry recorded as working when taken, not yet read back filled: the CLOSE pulls it),
    /// and a WARN row says it was decided before the bot was read back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_alert_waits_no_longer_than_the_bound_for_a_read_that_hangs() {
        let mock = Mock { post_delay: Duration::ZERO, get_delay: Duration::from_secs(30), down: false, msft: 0 };
        let (port, seen) = filling_broker(mock).await;
        let (dir, store, app) = fixture("read-back-hangs", port).await;
        app.read_back.set_wait(Duration::from_millis(700));
        let (d, out) = alert(&app, TOKEN, "demo-equities", OPEN).await;
        assert_eq!(d, Decision::Processed, "{out}");
        until("the OPEN never reached the broker", Duration::from_secs(5), || !seen.lock().unwrap().orders.is_empty())
            .await;
        let started = tokio::time::Instant::now();
        let (d, out) = alert(&app, TOKEN, "demo-equities", CLOSE).await;
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(650), "it did not wait for the read: {took:?}");
        assert!(took < Duration::from_millis(700 + 400), "it waited past the bound: {took:?}");
        assert_eq!(d, Decision::Processed, "decided against the state as it stands: {out}");
        assert!(
            out.contains(r#""kind":"cancel","#) && out.contains(r#""order_id":"2001""#),
            "the entry not pulled: {out}"
        );
        let warned = || {
            let q = crate::store::LogQuery { limit: 100, ..Default::default() };
            app.reader.logs("demo-equities", &q).unwrap().iter().any(|r| {
                r.message.contains("decided before bot tt's broker was read back after its entry") && r.level == "WARN"
            })
        };
        let end = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            app.writer.barrier().await.unwrap();
            if warned() {
                break;
            }
            assert!(tokio::time::Instant::now() < end, "no WARN row");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Nothing to wait for, nothing waited for: a strategy with paper bots only, while another strategy's entry is
    /// on its way, and an http bot whose entry has been read back since, go straight to their decision, asking
    /// for no read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn alerts_with_nothing_to_read_back_do_not_wait() {
        let mock =
            Mock { post_delay: Duration::from_millis(500), get_delay: Duration::from_millis(20), down: false, msft: 0 };
        let (port, seen) = filling_broker(mock).await;
        let (dir, store, app) = fixture("read-back-none", port).await;
        first_read(&seen).await;
        assert!(ReadBack::enter(&app, "paper-only").await.is_none(), "a paper strategy with nothing marked waited");
        let (d, out) = alert(&app, TOKEN, "demo-equities", OPEN).await;
        assert_eq!(d, Decision::Processed, "{out}");
        until("the OPEN never went out", Duration::from_secs(5), || {
            seen.lock().unwrap().requests.iter().any(|r| r.starts_with("POST"))
        })
        .await;
        assert!(app.read_back.busy.load(Ordering::SeqCst) > 0, "the entry in flight is not marked");
        assert!(ReadBack::enter(&app, "paper-only").await.is_none(), "the paper strategy waited for another's bot");
        // Once read back after its entry, the bot has nothing to wait for.
        until("the entry was never read back", Duration::from_secs(5), || {
            app.read_back.busy.load(Ordering::SeqCst) == 0
        })
        .await;
        let reads = seen.lock().unwrap().requests.iter().filter(|r| r.starts_with("GET")).count();
        let entered = ReadBack::enter(&app, "demo-equities").await;
        assert!(entered.is_none(), "an http bot read back since its entry waited");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let after = seen.lock().unwrap().requests.iter().filter(|r| r.starts_with("GET")).count();
        assert_eq!(after, reads, "a read was asked for");
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A broker down for new orders (503): the entry waits in its retries, and the strategy's next alerts are
    /// not held up by it (the overtaken check deals with it), however long the outage.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_in_retries_does_not_hold_up_later_alerts() {
        let mock = Mock { post_delay: Duration::ZERO, get_delay: Duration::ZERO, down: true, msft: 0 };
        let (port, seen) = filling_broker(mock).await;
        let (dir, store, app) = fixture("read-back-retries", port).await;
        first_read(&seen).await;
        let (d, out) = alert(&app, TOKEN, "demo-equities", OPEN).await;
        assert_eq!(d, Decision::Processed, "{out}");
        until("the OPEN never went out", Duration::from_secs(5), || {
            seen.lock().unwrap().requests.iter().any(|r| r.starts_with("POST"))
        })
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        for _ in 0..5 {
            assert!(ReadBack::enter(&app, "demo-equities").await.is_none(), "an alert waited behind a retried entry");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!app.reader.open_rows("demo-equities", "tt", 10).unwrap().is_empty(), "the entry is no longer retried");
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Two alerts of the strategy while it waits for a read: the second, which came while the first waited, is
    /// decided after it, although nothing is left to wait for when both wake.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn alerts_waiting_for_a_read_are_decided_in_the_order_they_came() {
        let mock = Mock { post_delay: Duration::ZERO, get_delay: Duration::from_millis(300), down: false, msft: 0 };
        let (port, seen) = filling_broker(mock).await;
        let (dir, store, app) = fixture("read-back-order", port).await;
        first_read(&seen).await;
        let (d, out) = alert(&app, TOKEN, "demo-equities", OPEN).await;
        assert_eq!(d, Decision::Processed, "{out}");
        until("the OPEN never reached the broker", Duration::from_secs(5), || !seen.lock().unwrap().orders.is_empty())
            .await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let go = |name: &'static str| {
            let (app, order) = (Arc::clone(&app), Arc::clone(&order));
            tokio::spawn(async move {
                let entered = ReadBack::enter(&app, "demo-equities").await;
                order.lock().unwrap().push(name);
                drop(entered);
            })
        };
        let first = go("first");
        tokio::time::sleep(Duration::from_millis(30)).await;
        let second = go("second");
        first.await.unwrap();
        second.await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["first", "second"]);
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The read right after the OPEN's market entry came too early: the broker did not list the new order yet, nor
    /// (not filled for 300 ms) its position, and the CLOSE 50 ms after the OPEN, decided against that read, was
    /// rejected "nothing to close" while the entry filled. The entry is recorded as working when taken, so the read
    /// finds it by its id: still working, the CLOSE pulls it, and nothing is left open at the broker.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_after_a_read_that_came_before_the_entry_was_listed_leaves_nothing_open() {
        let fill_after = Duration::from_millis(300);
        let (port, book) = late_broker(fill_after).await;
        let (dir, store, app) = fixture("read-back-late", port).await;
        until("the sync never read the account", Duration::from_secs(5), || {
            app.bot_state("demo-equities", "tt").source.is_some()
        })
        .await;
        let (d, out) = alert(&app, TOKEN, "demo-equities", OPEN).await;
        assert_eq!(d, Decision::Processed, "{out}");
        until("the OPEN never reached the broker", Duration::from_secs(5), || !book.lock().unwrap().orders.is_empty())
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (d, out) = alert(&app, TOKEN, "demo-equities", CLOSE).await;
        assert_eq!(d, Decision::Processed, "the CLOSE was not processed: {out}");
        // Past the entry's fill, and a close's.
        tokio::time::sleep(fill_after * 3).await;
        {
            let b = book.lock().unwrap();
            let sent: Vec<(&str, u64, bool)> =
                b.orders.iter().map(|o| (o.action.as_str(), o.size, o.cancelled)).collect();
            assert_eq!(b.held(fill_after), 0, "a position is left open at the broker: {sent:?}");
            assert_eq!(b.working(fill_after), 0, "an order is left working at the broker: {sent:?}");
        }
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The OPEN's row waits behind the bot's earlier row (a close of MSFT the broker answers after 300 ms) when the
    /// CLOSE, sent as soon as the OPEN was answered, is decided: nothing marked the entry (its first attempt had not
    /// started), the CLOSE was rejected "nothing to close", and the entry, younger than the age past which a row is
    /// checked against later alerts, went out and opened the position the sender had closed. The entry is marked
    /// when handed off: the CLOSE waits for its first attempt and the read after it, and closes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_right_after_its_open_was_answered_waits_for_the_entry_still_queued() {
        let mock = Mock {
            post_delay: Duration::from_millis(300),
            get_delay: Duration::from_millis(20),
            down: false,
            msft: 10,
        };
        let (port, seen) = filling_broker(mock).await;
        let (dir, store, app) = fixture("read-back-queued", port).await;
        until("the sync never read MSFT held", Duration::from_secs(5), || {
            !app.bot_state("demo-equities", "tt").positions.is_empty()
        })
        .await;
        let (d, out) =
            alert(&app, TOKEN, "demo-equities", r#"{"ticker":"MSFT","action":"CLOSE","direction":"long"}"#).await;
        assert_eq!(d, Decision::Processed, "{out}");
        until("the MSFT close never went out", Duration::from_secs(5), || {
            seen.lock().unwrap().requests.iter().any(|r| r.starts_with("POST"))
        })
        .await;
        let (d, out) = alert(&app, TOKEN, "demo-equities", OPEN).await;
        assert_eq!(d, Decision::Processed, "{out}");
        let (d, out) = alert(&app, TOKEN, "demo-equities", CLOSE).await;
        assert_eq!(d, Decision::Processed, "the CLOSE was not processed: {out}");
        until("the AAPL close never reached the broker", Duration::from_secs(5), || {
            seen.lock().unwrap().orders.len() > 2
        })
        .await;
        // Time for anything else to go out.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let net = seen.lock().unwrap().net("AAPL");
        assert_eq!(net, 0, "AAPL left held at the broker: {:?}", seen.lock().unwrap().orders);
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A queued entry's mark counts for [`QUEUED_FOR`], no longer: an entry whose first attempt never comes (its
    /// row failed to be stored, or it waits behind a broker in back-off) holds up its strategy's alerts no more.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queued_entry_that_never_goes_out_stops_counting() {
        let mock = Mock { post_delay: Duration::ZERO, get_delay: Duration::ZERO, down: false, msft: 0 };
        let (port, seen) = filling_broker(mock).await;
        let (dir, store, app) = fixture("read-back-expires", port).await;
        first_read(&seen).await;
        app.read_back.set_wait(Duration::from_secs(10));
        app.read_back.queued("demo-equities", "tt", "swh-never-sent");
        let started = tokio::time::Instant::now();
        assert!(ReadBack::enter(&app, "demo-equities").await.is_some(), "the queued entry was not waited for");
        let took = started.elapsed();
        assert!(took >= QUEUED_FOR - Duration::from_millis(50), "it did not wait for the mark: {took:?}");
        assert!(took < QUEUED_FOR + Duration::from_millis(500), "it waited past the mark: {took:?}");
        assert!(ReadBack::enter(&app, "demo-equities").await.is_none(), "an expired mark held up the next alert");
        assert_eq!(app.read_back.busy.load(Ordering::SeqCst), 0, "an expired mark is still counted");
        // Cleared when its row is done with, before it expires.
        app.read_back.queued("demo-equities", "tt", "swh-failed");
        app.read_back.unqueued("demo-equities", "tt", "swh-failed");
        assert!(ReadBack::enter(&app, "demo-equities").await.is_none(), "a row done with still held up an alert");
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }
}
