//! The read back after an entry: an alert whose decision depends on an instrument's position waits, bounded, for
//! the account of an http bot with an entry in that instrument to be read back after the broker took it.
//!
//! A strategy often fires an OPEN and its CLOSE within milliseconds (an exit on the same bar). An http bot's state
//! learns of a market entry's fill only when the sync reads the account back after the delivery, a few hundred
//! milliseconds later: a CLOSE decided in between found nothing to close (or, after an add-on entry, closed only
//! the older part), and the position the sender closed stayed open.
//!
//! So the entry is *marked* (bot, instrument, side) when its orders are decided, in the strategy's turn: no alert of
//! the strategy decided after it can miss the mark. A CLOSE's exit is marked the same way, so a reversal's OPEN sent
//! right after it (its own alert) finds the position closed rather than refused as holding the other side. The
//! mark is cleared by a read of the bot's account that started after the broker answered the order, by its
//! delivery ending without the broker taking it (refused,
//! failed, expired, held back, left to a retry), by the bot leaving the strategy, or [`HORIZON`] after it last
//! moved. Only an alert that acts on a marked instrument's position waits for it: a CLOSE, a MODIFY, a CANCEL, an
//! OPEN of the other side, any alert of more than one step, any option OPEN (whose legs are checked against the
//! positions held); a same-side OPEN of shares or coins (sized without looking at the position) does not. While the
//! bot's reads fail nothing waits for it (the sync warns of the stale state). Every other alert (another
//! instrument, a strategy with nothing marked) pays one atomic load, or a look under one short lock and a second
//! parse of its body when its strategy has marks.
//!
//! The wait keeps the strategy's turn ([`crate::cpu::Turn`]), so a CLOSE and the reversal behind it are decided in
//! their order, but holds no pool thread, no lock and no in-flight slot meanwhile: other strategies go on. Waiting
//! in the strategy's own turn is acceptable only because it is rare (an alert on an instrument entered within the
//! last read's time) and bounded (`--read-back-wait-ms`, 1.5 s by default; 0 turns the read back off). Past the
//! bound the alert is decided as the state stands, with a WARN row saying so.
//!
//! Single server only: on a shared database another server may deliver the entry and read the account, and its
//! reads would never clear a mark made here (left open, see docs/server.md).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use strategy_webhook::alert::{Action, ActionKind};
use strategy_webhook::model::{AssetClass, Direction, InstrumentKey};
use strategy_webhook::Strategy;
use tokio::sync::Notify;

/// The default of `--read-back-wait-ms`.
pub const DEFAULT_WAIT: Duration = Duration::from_millis(1500);

/// A mark nothing cleared (a read that never came) is let go this long after it last moved.
const HORIZON: Duration = Duration::from_secs(60);

/// How often a waiting alert looks again without being woken (a reload that took the bot out of the strategy).
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// An order of an http bot not read back yet (its instrument is the key it is filed under).
#[derive(Debug)]
struct Mark {
    bot: String,
    direction: Direction,
    client_order_id: String,
    /// Set when the broker took the order: the tick of that answer ([`ReadBack::tick`]). A read whose start tick is
    /// later clears it.
    answered: Option<u64>,
    moved: Instant,
}

/// The marks, filed so that an alert looks only at its own instruments', a delivery finds its own at once, and a
/// read looks only at the orders taken since the last: the latency of a strategy with thousands of orders in its
/// outbox must not grow with them.
#[derive(Default)]
struct Marks {
    /// By strategy, then instrument.
    by_strategy: HashMap<String, HashMap<InstrumentKey, Vec<Mark>>>,
    /// Where each mark is filed, by client order id: (strategy, instrument).
    by_order: HashMap<String, (String, InstrumentKey)>,
    /// The orders the broker took that no read cleared yet, by strategy: (bot, answer's tick, client order id).
    taken: HashMap<String, Vec<(String, u64, String)>>,
    /// (strategy, bot) whose last read of the account failed: nothing is marked or waited for them. A few at most.
    failing: Vec<(String, String)>,
    /// When marks past the horizon were last dropped.
    swept: Option<Instant>,
}

impl Marks {
    fn failing(&self, strategy: &str, bot: &str) -> bool {
        self.failing.iter().any(|(s, b)| s == strategy && b == bot)
    }

    /// The mark of an order, if any.
    fn of_order(&mut self, client_order_id: &str) -> Option<&mut Mark> {
        let (strategy, key) = self.by_order.get(client_order_id)?;
        let marks = self.by_strategy.get_mut(strategy.as_str())?.get_mut(key)?;
        marks.iter_mut().find(|k| k.client_order_id == client_order_id)
    }

    /// Drops an order's mark when `gone` says so; whether it did.
    fn remove_order(&mut self, client_order_id: &str, gone: impl Fn(&Mark) -> bool) -> bool {
        let Some((strategy, key)) = self.by_order.get(client_order_id) else { return false };
        let Some(by_key) = self.by_strategy.get_mut(strategy.as_str()) else { return false };
        let Some(marks) = by_key.get_mut(key) else { return false };
        let Some(at) = marks.iter().position(|k| k.client_order_id == client_order_id && gone(k)) else { return false };
        marks.swap_remove(at);
        if marks.is_empty() {
            by_key.remove(key);
            if by_key.is_empty() {
                self.by_strategy.remove(strategy.as_str());
            }
        }
        self.by_order.remove(client_order_id);
        true
    }

    /// Drops the taken orders of `bot` in `strategy` that `cleared` says a read cleared (by their answer's tick); how
    /// many marks went.
    fn clear_taken(&mut self, strategy: &str, bot: &str, cleared: impl Fn(u64) -> bool) -> usize {
        let Some(taken) = self.taken.get_mut(strategy) else { return 0 };
        let mut gone = Vec::new();
        taken.retain(|(b, tick, coid)| {
            let g = b == bot && cleared(*tick);
            if g {
                gone.push(coid.clone());
            }
            !g
        });
        if taken.is_empty() {
            self.taken.remove(strategy);
        }
        gone.iter().filter(|c| self.remove_order(c, |k| k.answered.is_some())).count()
    }

    /// Drops the marks of `strategy` that `gone` says are gone (a scan of the strategy's marks); how many.
    fn remove_where(&mut self, strategy: &str, gone: impl Fn(&Mark) -> bool) -> usize {
        let Some(by_key) = self.by_strategy.get_mut(strategy) else { return 0 };
        let mut removed = 0;
        for marks in by_key.values_mut() {
            marks.retain(|k| {
                let g = gone(k);
                if g {
                    self.by_order.remove(&k.client_order_id);
                    removed += 1;
                }
                !g
            });
        }
        by_key.retain(|_, marks| !marks.is_empty());
        if by_key.is_empty() {
            self.by_strategy.remove(strategy);
        }
        removed
    }
}

/// What an alert waits for: orders of its strategy's bots in the instruments it acts on.
#[derive(Debug)]
pub struct Awaited {
    strategy: String,
    /// (bot, instrument) pairs.
    on: Vec<(String, InstrumentKey)>,
}

impl Awaited {
    /// The strategy's id.
    pub fn strategy(&self) -> &str {
        &self.strategy
    }

    /// The instruments and bots, for the Logs (`AAPL on bot b`).
    fn describe(&self) -> String {
        let mut parts: Vec<String> = self.on.iter().map(|(b, k)| format!("{k} on bot {b}")).collect();
        parts.dedup();
        parts.join(", ")
    }
}

/// The marks, and the wait (see the module).
pub struct ReadBack {
    wait_ms: AtomicU64,
    /// How many marks there are: an alert on a server with none pays this load alone.
    count: AtomicUsize,
    marks: Mutex<Marks>,
    /// Orders answers and reads' starts.
    ticks: AtomicU64,
    changed: Notify,
}

impl Default for ReadBack {
    fn default() -> Self {
        ReadBack {
            wait_ms: AtomicU64::new(u64::try_from(DEFAULT_WAIT.as_millis()).unwrap_or(1500)),
            count: AtomicUsize::new(0),
            marks: Mutex::default(),
            ticks: AtomicU64::new(1),
            changed: Notify::new(),
        }
    }
}

impl ReadBack {
    /// Sets the bound (`--read-back-wait-ms`); zero turns the read back off.
    pub fn set_wait(&self, wait: Duration) {
        self.wait_ms.store(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The bound.
    pub fn wait(&self) -> Duration {
        Duration::from_millis(self.wait_ms.load(Ordering::Relaxed))
    }

    /// Whether orders are marked at all.
    pub fn enabled(&self) -> bool {
        self.wait_ms.load(Ordering::Relaxed) > 0
    }

    /// Whether any mark is held (a delivery then says how it ended).
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tick(&self) -> u64 {
        self.ticks.fetch_add(1, Ordering::AcqRel)
    }

    fn removed(&self, n: usize) {
        if n > 0 {
            self.count.fetch_sub(n, Ordering::AcqRel);
            self.changed.notify_waiters();
        }
    }

    /// An order of http bot `bot` decided in `strategy`'s turn, before its rows are committed.
    pub fn entered(&self, strategy: &str, bot: &str, key: InstrumentKey, direction: Direction, client_order_id: &str) {
        let now = Instant::now();
        let mut m = self.lock();
        // A bot whose reads fail is not waited for: its orders are not marked.
        if !m.failing.is_empty() && m.failing(strategy, bot) {
            return;
        }
        let mark = Mark {
            bot: bot.to_owned(),
            direction,
            client_order_id: client_order_id.to_owned(),
            answered: None,
            moved: now,
        };
        m.by_order.insert(client_order_id.to_owned(), (strategy.to_owned(), key.clone()));
        match m.by_strategy.get_mut(strategy) {
            Some(by_key) => by_key.entry(key).or_default().push(mark),
            None => {
                m.by_strategy.insert(strategy.to_owned(), HashMap::from([(key, vec![mark])]));
            }
        }
        self.count.fetch_add(1, Ordering::AcqRel);
        // Once a second at most, marks past the horizon go (nothing cleared them: a read that never came).
        let mut dropped = 0;
        if m.swept.map_or(true, |t| now.duration_since(t) >= Duration::from_secs(1)) {
            m.swept = Some(now);
            let strategies: Vec<String> = m.by_strategy.keys().cloned().collect();
            for s in strategies {
                dropped += m.remove_where(&s, |k| now.duration_since(k.moved) >= HORIZON);
            }
            let Marks { taken, by_order, .. } = &mut *m;
            for t in taken.values_mut() {
                t.retain(|(_, _, coid)| by_order.contains_key(coid));
            }
            taken.retain(|_, t| !t.is_empty());
        }
        drop(m);
        self.removed(dropped);
    }

    /// The broker took the order (on an attempt, or found by a lookup): a read starting from now clears it.
    pub fn answered(&self, strategy: &str, bot: &str, client_order_id: &str) {
        if !self.any() {
            return;
        }
        let tick = self.tick();
        let mut m = self.lock();
        let Some(mark) = m.of_order(client_order_id).filter(|k| k.bot == bot) else { return };
        mark.answered = Some(tick);
        mark.moved = Instant::now();
        let entry = (bot.to_owned(), tick, client_order_id.to_owned());
        match m.taken.get_mut(strategy) {
            Some(t) => t.push(entry),
            None => {
                m.taken.insert(strategy.to_owned(), vec![entry]);
            }
        }
    }

    /// The order's delivery is over: unless the broker took it, nothing is to be read back for it.
    pub fn delivered(&self, _strategy: &str, bot: &str, client_order_id: &str) {
        if !self.any() {
            return;
        }
        let gone = self.lock().remove_order(client_order_id, |k| k.bot == bot && k.answered.is_none());
        self.removed(usize::from(gone));
    }

    /// Orders whose rows were not stored (the alert's commit failed): they never go out.
    pub fn not_stored(&self, _strategy: &str, client_order_ids: &[String]) {
        if !self.any() {
            return;
        }
        let mut m = self.lock();
        let gone = client_order_ids.iter().filter(|c| m.remove_order(c, |_| true)).count();
        drop(m);
        self.removed(gone);
    }

    /// A read of an account starts: its tick, for [`ReadBack::read_done`].
    pub fn read_starting(&self) -> u64 {
        self.tick()
    }

    /// A read of `bot`'s account that started at tick `started` succeeded: every order the broker took before is in
    /// it.
    pub fn read_done(&self, strategy: &str, bot: &str, started: u64) {
        let mut m = self.lock();
        if !m.failing.is_empty() {
            m.failing.retain(|(s, b)| s != strategy || b != bot);
        }
        let gone = m.clear_taken(strategy, bot, |tick| tick < started);
        drop(m);
        self.removed(gone);
    }

    /// A read of `bot`'s account failed: nothing is marked or waited for it until one succeeds, and its orders the
    /// broker took are let go (the sync warns of the stale state).
    pub fn read_failed(&self, strategy: &str, bot: &str) {
        let mut m = self.lock();
        if !m.failing(strategy, bot) {
            m.failing.push((strategy.to_owned(), bot.to_owned()));
        }
        let gone = m.clear_taken(strategy, bot, |_| true);
        drop(m);
        self.removed(gone);
        self.changed.notify_waiters();
    }

    /// `bot` is no longer an http bot of `strategy` (its sync task ended): its marks go.
    pub fn forget(&self, strategy: &str, bot: &str) {
        let mut m = self.lock();
        m.failing.retain(|(s, b)| s != strategy || b != bot);
        m.clear_taken(strategy, bot, |_| true);
        let gone = m.remove_where(strategy, |k| k.bot == bot);
        drop(m);
        self.removed(gone);
    }

    /// What an alert of `strategy` with this body waits for, in the strategy's turn: `None` (at the cost of one
    /// atomic load when nothing is marked) unless it acts on the position of an instrument one of the strategy's
    /// http bots (`http`) has an order in that is not read back yet.
    pub fn awaited(
        &self,
        strategy: &Strategy,
        body: &[u8],
        content_type: Option<&str>,
        http: impl Fn(&str) -> bool,
    ) -> Option<Awaited> {
        if !self.any() {
            return None;
        }
        let id: &str = &strategy.id;
        if !self.lock().by_strategy.contains_key(id) {
            return None;
        }
        // Parsed outside the lock; what is marked is looked at again after.
        let alerts = strategy_webhook::parse(body, content_type).ok()?;
        let mut on: Vec<(String, InstrumentKey)> = Vec::new();
        let now = Instant::now();
        let m = self.lock();
        let by_key = m.by_strategy.get(id)?;
        for a in &alerts {
            let key = InstrumentKey::new(&a.instrument, strategy.asset_class);
            let Some(marks) = by_key.get(&key) else { continue };
            // Marks within the horizon, of a bot still the strategy's http bot, whose reads do not fail.
            let live = |k: &&Mark| {
                now.duration_since(k.moved) < HORIZON
                    && !m.failing(id, &k.bot)
                    && strategy.bots.iter().any(|b| *b.id == *k.bot)
                    && http(&k.bot)
            };
            if !marks.iter().any(|k| live(&k)) {
                continue;
            }
            // A same-side OPEN of shares or coins is sized without the position: it goes at once. (Its decision
            // looks at the other side's position only, which a mark of the same side does not change.)
            let step = match a.action {
                ActionKind::Canonical(action) => Some((action, a.direction)),
                ActionKind::Word(w) => strategy_webhook::decide::rule_for(strategy, w).map(|(x, d)| (x, Some(d))),
            };
            let Some((action, direction)) = step else { continue };
            let independent = alerts.len() == 1
                && action == Action::Open
                && strategy.asset_class != AssetClass::Option
                && direction.is_some_and(|d| marks.iter().filter(live).all(|k| k.direction == d));
            if !independent {
                on.extend(marks.iter().filter(live).map(|k| (k.bot.clone(), key.clone())));
            }
        }
        (!on.is_empty()).then(|| Awaited { strategy: id.to_owned(), on })
    }

    /// Whether any order `awaited` names is still not read back (its bot's reads not failing, itself an http bot
    /// of the strategy, its mark within the horizon).
    fn still(&self, awaited: &Awaited, http: &impl Fn(&str) -> bool) -> bool {
        if !self.any() {
            return false;
        }
        let m = self.lock();
        let Some(by_key) = m.by_strategy.get(&awaited.strategy) else { return false };
        let now = Instant::now();
        awaited.on.iter().any(|(bot, key)| {
            by_key.get(key).is_some_and(|marks| {
                marks.iter().any(|k| {
                    k.bot == *bot
                        && now.duration_since(k.moved) < HORIZON
                        && !m.failing(&awaited.strategy, &k.bot)
                        && http(&k.bot)
                })
            })
        })
    }

    /// Waits until no order `awaited` names is left to read back, or the bound. `None` when it was read back (or
    /// needs no more waiting), else the WARN row's text for the alert decided without it.
    pub async fn wait_for(&self, awaited: &Awaited, http: impl Fn(&str) -> bool) -> Option<String> {
        let bound = self.wait();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !self.still(awaited, &http) {
                return None;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Some(format!(
                    "decided without the read back of the order in {} (its account was not read back within {} ms \
                     of the order's decision; --read-back-wait-ms): the position may differ from what the state says",
                    awaited.describe(),
                    bound.as_millis()
                ));
            }
            let _ = tokio::time::timeout(LOOK_AGAIN.min(deadline - now), changed).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strategy() -> Strategy {
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        // The demo's first bot alone, as bot `b`.
        let mut bot = v["bots"][0].clone();
        bot["id"] = serde_json::json!("b");
        v["bots"] = serde_json::json!([bot]);
        Strategy::from_json(v.to_string().as_bytes()).unwrap()
    }

    fn key(s: &str) -> InstrumentKey {
        InstrumentKey::new(s, AssetClass::Equity)
    }

    fn awaited(rb: &ReadBack, s: &Strategy, body: &str) -> Option<Awaited> {
        rb.awaited(s, body.as_bytes(), Some("application/json"), |_| true)
    }

    #[test]
    fn only_alerts_acting_on_a_marked_instruments_position_wait() {
        let (rb, s) = (ReadBack::default(), strategy());
        assert!(awaited(&rb, &s, r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#).is_none());
        rb.entered("demo-equities", "b", key("AAPL"), Direction::Long, "c1");
        for waits in [
            r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#,
            r#"{"ticker":"aapl","action":"sell"}"#,
            r#"{"ticker":"AAPL","action":"OPEN","direction":"short"}"#,
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":"1"}"#,
            r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#,
            r#"{"ticker":"AAPL","action":"CLOSE"}"#,
        ] {
            assert!(awaited(&rb, &s, waits).is_some(), "{waits}");
        }
        for goes in [
            r#"{"ticker":"MSFT","action":"CLOSE","direction":"long"}"#,
            r#"{"ticker":"AAPL","action":"buy"}"#,
            r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#,
            r#"{"ticker":"MSFT","action":"sell"}"#,
        ] {
            assert!(awaited(&rb, &s, goes).is_none(), "{goes}");
        }
        // Another strategy's alert never looks at this one's marks.
        let mut other = strategy();
        other.id = "other".into();
        assert!(awaited(&rb, &other, r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#).is_none());
    }

    #[test]
    fn a_mark_is_cleared_by_a_read_started_after_the_answer_only() {
        let (rb, s) = (ReadBack::default(), strategy());
        let close = r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#;
        rb.entered("demo-equities", "b", key("AAPL"), Direction::Long, "c1");
        let early = rb.read_starting();
        rb.read_done("demo-equities", "b", early);
        assert!(awaited(&rb, &s, close).is_some(), "a read before the answer cleared the mark");
        let during = rb.read_starting();
        rb.answered("demo-equities", "b", "c1");
        rb.read_done("demo-equities", "b", during);
        assert!(awaited(&rb, &s, close).is_some(), "a read started before the answer cleared the mark");
        let after = rb.read_starting();
        rb.read_done("demo-equities", "b", after);
        assert!(awaited(&rb, &s, close).is_none());
        assert!(!rb.any());
    }

    #[test]
    fn an_entry_never_taken_a_failing_bot_and_a_bot_gone_hold_nothing() {
        let (rb, s) = (ReadBack::default(), strategy());
        let close = r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#;
        rb.entered("demo-equities", "b", key("AAPL"), Direction::Long, "c1");
        rb.delivered("demo-equities", "b", "c1");
        assert!(awaited(&rb, &s, close).is_none(), "a refused entry is waited for");
        rb.entered("demo-equities", "b", key("AAPL"), Direction::Long, "c2");
        rb.answered("demo-equities", "b", "c2");
        rb.delivered("demo-equities", "b", "c2");
        assert!(awaited(&rb, &s, close).is_some(), "a taken entry is not waited for");
        rb.read_failed("demo-equities", "b");
        assert!(awaited(&rb, &s, close).is_none(), "waited for a bot whose reads fail");
        assert!(!rb.any(), "the taken entry of a bot whose reads fail is let go");
        rb.entered("demo-equities", "b", key("AAPL"), Direction::Long, "c5");
        assert!(!rb.any(), "an entry of a bot whose reads fail is marked");
        // A good read: the bot's entries are marked again.
        rb.read_done("demo-equities", "b", 0);
        rb.entered("demo-equities", "b", key("AAPL"), Direction::Long, "c6");
        assert!(awaited(&rb, &s, close).is_some());
        assert!(rb.awaited(&s, close.as_bytes(), None, |_| false).is_none(), "a bot no longer http is waited for");
        rb.forget("demo-equities", "b");
        assert!(!rb.any());
        rb.entered("demo-equities", "b", key("AAPL"), Direction::Long, "c3");
        rb.forget("demo-equities", "b");
        assert!(awaited(&rb, &s, close).is_none());
        rb.entered("demo-equities", "b", key("AAPL"), Direction::Long, "c4");
        rb.not_stored("demo-equities", &["c4".to_owned()]);
        assert!(!rb.any());
    }

    #[tokio::test]
    async fn the_wait_ends_at_the_read_or_at_the_bound() {
        let rb = std::sync::Arc::new(ReadBack::default());
        rb.set_wait(Duration::from_millis(200));
        let s = strategy();
        let close = r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#;
        rb.entered("demo-equities", "b", key("AAPL"), Direction::Long, "c1");
        let a = awaited(&rb, &s, close).unwrap();
        let t = Instant::now();
        let note = rb.wait_for(&a, |_| true).await;
        assert!(t.elapsed() >= Duration::from_millis(190), "{:?}", t.elapsed());
        assert!(note.is_some_and(|n| n.contains("AAPL on bot b")));
        let reader = {
            let rb = std::sync::Arc::clone(&rb);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(30)).await;
                rb.answered("demo-equities", "b", "c1");
                let started = rb.read_starting();
                rb.read_done("demo-equities", "b", started);
            })
        };
        let t = Instant::now();
        assert_eq!(rb.wait_for(&a, |_| true).await, None);
        assert!(t.elapsed() < Duration::from_millis(150), "{:?}", t.elapsed());
        reader.await.unwrap();
    }
}
