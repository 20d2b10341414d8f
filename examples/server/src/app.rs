//! What the listeners share: the engine, the database handles, the rotated tokens, and the URLs to show.

use crate::bots::Bots;
use crate::dispatch::Dispatcher;
use crate::lease::Leases;
use crate::paper::{BotState, StateSource};
use crate::store::pg::Pg;
use crate::store::{Committed, LogEntry, Mark, OutboxRow, Reader, StoreError, Writer};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use strategy_webhook::alert::{Action, ActionKind};
use strategy_webhook::engine::parse_hex_key;
use strategy_webhook::model::{CryptoPair, OrderType, ProductIncrements};
use strategy_webhook::outcome::{OrderRequest, RequestKind};
use strategy_webhook::state::DedupKey;
use strategy_webhook::{Decision, Engine, EngineError, Outcome, Strategy, TokenHash};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long a stored request stays worth sending, and test hooks of the hand-off.
#[derive(Debug, Clone, Copy)]
pub struct Freshness {
    /// A market order (or a change to one) is not sent later than this after its alert was received.
    pub market_ttl_ms: i64,
    /// A limit order (or a change to one) is not sent later than this after its alert was received.
    pub limit_ttl_ms: i64,
    /// Tests only: how long the hand-off waits before committing (a slow disk).
    pub commit_delay: Duration,
}

impl Default for Freshness {
    fn default() -> Freshness {
        Freshness { market_ttl_ms: 60_000, limit_ttl_ms: 3_600_000, commit_delay: Duration::ZERO }
    }
}

impl Freshness {
    /// The deadline of a request whose alert was received at `received`: `None` for a cancel (always worth
    /// sending, it cannot open a position), else by the order's type; an order the row cannot describe gets the
    /// market's.
    pub fn deadline(&self, kind: RequestKind, order_type: Option<OrderType>, received: i64) -> Option<i64> {
        match (kind, order_type) {
            (RequestKind::Cancel, _) => None,
            (_, Some(OrderType::Limit)) => Some(received.saturating_add(self.limit_ttl_ms)),
            _ => Some(received.saturating_add(self.market_ttl_ms)),
        }
    }
}

/// How a hand-off still being committed ends: `true` committed, `false` failed with its key given back.
pub type Committing = watch::Receiver<Option<bool>>;

/// A processed alert's commit, queued in its strategy's turn (`App::queue_hand_off`) and not yet awaited.
struct QueuedHandOff {
    strategy: Arc<str>,
    /// The dedup key, given back if the commit fails.
    key: String,
    /// The bots with rows in it, whose dispatchers are woken once it is committed.
    bots: Vec<String>,
    /// The alerts, for the Logs' row saying they were not stored.
    alerts: Option<String>,
    /// When the alert was received, the time of its rows and of the Logs row saying they were not stored.
    received: i64,
    /// The end of the commit, or why it could not be queued.
    committed: Result<Committed, StoreError>,
    /// The client order ids of its http bots' entries, marked for the read back (`read_back.rs`): let go if the
    /// commit fails.
    entries: Vec<String>,
}

/// The bundled demo strategy's `token_hash` (examples/strategies/demo.json), published in the README and the docs.
pub const PUBLISHED_DEMO_TOKEN: &str = "d4080c65a7ec92cae69c9e5e26b0bdc2bf10f18df4eee5217ef0d1eb5ec3874c";

/// The server's state.
pub struct App {
    /// The decision engine: strategies by token, rate and dedup windows.
    pub engine: Engine,
    /// Queues writes to the database.
    pub writer: Writer,
    /// Reads the database.
    pub reader: Reader,
    /// Tokens rotated through the admin API, by strategy id. They win over the snapshot files' `token_hash`,
    /// so that no secret is ever written back to a strategy file. The lock also orders a rotation against a
    /// reload of the same strategy, so that neither undoes the other.
    overrides: Mutex<HashMap<String, TokenHash>>,
    /// Tokens rotated away (here, on another server sharing the database, or before a restart), with the strategy
    /// each was rotated away from; under the `overrides` lock. A snapshot file that names one is refused: a
    /// strategy file whose id was changed after a rotation, or a copy of a rotated strategy's file, would
    /// otherwise answer a token rotated away (perhaps because it leaked) again.
    retired: Mutex<HashMap<TokenHash, String>>,
    /// One rotation at a time: two at once could commit in one order and take effect in the other, leaving in
    /// memory a token the database no longer holds.
    rotating: tokio::sync::Mutex<()>,
    /// The live token of a strategy being rotated, pinned in `overrides` until the commit ends, with the token its
    /// file was edited to meanwhile (if it was); under the `overrides` lock. A failed rotation puts that one live,
    /// as the edit would have been without the rotation.
    pins: Mutex<HashMap<String, Option<TokenHash>>>,
    /// When each strategy's token last changed here (a rotation, or one adopted), under the `overrides` lock:
    /// a batch's read of the stored tokens taken before it may be older than what it replaced.
    token_changed: Mutex<HashMap<String, std::time::Instant>>,
    /// `https://host:port`, no trailing slash: the base of webhook URLs.
    pub public_url: String,
    /// The admin API's bearer token.
    pub admin_token: String,
    /// How each bot's orders are delivered.
    pub bots: Bots,
    /// The outbox's per-bot dispatchers.
    pub dispatcher: Dispatcher,
    /// The http bots' state sync tasks (`poke` one after a delivery).
    pub sync: crate::sync::Syncer,
    /// The http bots' entries not read back yet, that a CLOSE right after them waits for (`read_back.rs`).
    pub read_back: crate::read_back::ReadBack,
    /// Bots' positions and working orders, by (strategy, bot): the server's own, stored in the database and
    /// put into the engine's snapshots (they win over a snapshot file's).
    states: Mutex<HashMap<(String, String), BotState>>,
    /// By (strategy, bot): states a delivery set in memory whose commit has not finished
    /// ([`App::set_bot_state_committing`]). An operator's state set meanwhile could be committed before the
    /// delivery's, which would then stand in the database under the operator's state in memory.
    committing_states: Mutex<HashMap<(String, String), usize>>,
    /// Crypto product increments read from the bots' brokers, by (strategy, bot) and then by the strategy's
    /// name for the pair: put into the engine's snapshots with the states (they win over a snapshot file's).
    increments: Mutex<HashMap<(String, String), BTreeMap<String, ProductIncrements>>>,
    /// Processed alerts whose commit has not finished, by (strategy, dedup key): a retry of one of them is
    /// answered only once its first attempt's commit is durable (or has failed and given its key back).
    in_flight: Mutex<HashMap<(String, DedupKey), Committing>>,
    /// Deadlines of stored requests.
    pub freshness: Freshness,
    /// The shared database, when several servers share one (`--database postgres://…`): alerts are then
    /// counted, claimed and stored in one transaction there (`shared.rs`).
    pub shared: Option<Pg>,
    /// Which bots this server may send for and read (all of them, on the embedded database).
    pub leases: Arc<Leases>,
    /// The version of each bot state last read from the shared database, by (strategy, bot). Those this server
    /// wrote itself are the store's ([`Pg::written_state_version`]).
    state_versions: Mutex<HashMap<(String, String), i64>>,
    /// The shared database's batches of alerts, started on the first alert.
    pub committer: std::sync::OnceLock<crate::shared::Committer>,
}

impl App {
    /// A server state around an engine. `overrides` are the rotated tokens read from the database, `retired`
    /// the tokens rotated away.
    pub fn new(
        engine: Engine,
        writer: Writer,
        reader: Reader,
        (overrides, retired): (HashMap<String, TokenHash>, HashMap<TokenHash, String>),
        public_url: String,
        admin_token: String,
    ) -> App {
        App {
            engine,
            writer,
            reader,
            overrides: Mutex::new(overrides),
            retired: Mutex::new(retired),
            rotating: tokio::sync::Mutex::new(()),
            pins: Mutex::default(),
            token_changed: Mutex::default(),
            public_url,
            admin_token,
            bots: Bots::default(),
            dispatcher: Dispatcher::default(),
            sync: crate::sync::Syncer::default(),
            read_back: crate::read_back::ReadBack::default(),
            states: Mutex::default(),
            committing_states: Mutex::default(),
            increments: Mutex::default(),
            in_flight: Mutex::default(),
            freshness: Freshness::default(),
            shared: None,
            leases: Leases::local(),
            state_versions: Mutex::default(),
            committer: std::sync::OnceLock::new(),
        }
    }

    /// Shares the store with other servers through PostgreSQL (before serving).
    pub fn with_shared(mut self, pg: Pg, leases: Arc<Leases>) -> App {
        self.shared = Some(pg);
        self.leases = leases;
        self
    }

    /// Applies a token another server rotated (it is already stored): the old token answers 404 here too.
    #[cfg(test)]
    pub fn adopt_token(&self, id: &str, token: TokenHash) {
        self.adopt_token_read(id, token, None);
    }

    /// The token poller's step: applies the rows of a read sent at `sent`, skipping each row already applied
    /// (`applied`, by version) and, like a batch's read, any the server changed since the read went out: two
    /// rotations close together put the one rotated away back for a poll's time otherwise (its newest token
    /// answering 404 here). A skipped row is not marked applied, so the next poll looks at it again.
    pub fn adopt_token_rows(
        &self,
        rows: Vec<(String, String, i64)>,
        sent: std::time::Instant,
        applied: &mut HashMap<String, i64>,
    ) {
        for (id, token, version) in rows {
            if applied.get(&id) == Some(&version) {
                continue;
            }
            match TokenHash::parse(token.as_bytes()) {
                Some(t) => {
                    if self.adopt_token_read(&id, t, Some(sent)) {
                        applied.insert(id, version);
                    }
                }
                None => {
                    tracing::error!(strategy = %id, "ignoring a stored token of the wrong shape");
                    applied.insert(id, version);
                }
            }
        }
    }

    /// [`App::adopt_token`] for a token read from the database by a statement sent at `read_from`: skipped when
    /// the strategy's token changed here since, because the read may predate that change (a rotation that
    /// committed while the statement ran) and adopting it would put the old token back.
    /// Returns false when the read was skipped as older than a change made here since.
    pub fn adopt_token_read(&self, id: &str, token: TokenHash, read_from: Option<std::time::Instant>) -> bool {
        let mut overrides = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
        if overrides.get(id) == Some(&token) {
            return true;
        }
        let mut changed = self.token_changed.lock().unwrap_or_else(|e| e.into_inner());
        if read_from.is_some_and(|r| changed.get(id).is_some_and(|c| *c >= r)) {
            return false;
        }
        changed.insert(id.to_owned(), std::time::Instant::now());
        drop(changed);
        // The token it replaces was rotated away on the other server (and retired there in the same commit).
        if let Some(old) = overrides.get(id).cloned().or_else(|| self.engine.strategy(id).map(|s| s.token_hash.clone()))
        {
            self.retired.lock().unwrap_or_else(|e| e.into_inner()).insert(old, id.to_owned());
        }
        match self.engine.rotate(id, token.clone()) {
            Ok(()) => tracing::info!(strategy = id, "applied a token rotated on another server"),
            // Not loaded here (yet): the override applies when its snapshot is.
            Err(EngineError::UnknownStrategy(_)) => {}
            Err(e) => tracing::error!(strategy = id, error = %e, "a token rotated on another server was refused"),
        }
        overrides.insert(id.to_owned(), token);
        true
    }

    /// Takes the shared database's bot states of a strategy that changed since last read (another server
    /// delivered or synced), and puts them into the engine's snapshot. A bot whose lease this server holds
    /// keeps its own state (it is the one writing it, and may hold a delivery not yet committed), unless
    /// `only` names it: the bot whose lease was just taken. So does a bot with a state of this server's still
    /// committing, whatever the lease says (its time may have run out in a stall that held the commit too):
    /// the stored one is older than it, and the batch after the commit adopts whatever is stored then.
    pub fn adopt_bot_states(&self, strategy: &str, rows: Vec<(String, String, i64)>, only: Option<&str>) {
        let mut changed = false;
        {
            let mut versions = self.state_versions.lock().unwrap_or_else(|e| e.into_inner());
            for (bot, state, version) in rows {
                let skip = match only {
                    // A delivery's state still committing is newer than any stored one.
                    Some(b) => b != bot || self.state_committing(strategy, &bot),
                    None => self.leases.holds(strategy, &bot) || self.state_committing(strategy, &bot),
                };
                if skip {
                    continue;
                }
                let key = (strategy.to_owned(), bot);
                // Versions only grow (each write takes the next of one sequence): a read older than one adopted
                // already (two users of a lease taken fresh adopting at once, the first delivering in between)
                // must not put back the state before that delivery. Nor one older than this server's own write (a
                // batch read the states, then this server's sync or delivery stored a newer one and gave the lease
                // back): a position sold would come back, or one bought vanish.
                let written = self.shared.as_ref().and_then(|pg| pg.written_state_version(strategy, &key.1));
                if versions.get(&key).copied().max(written).is_some_and(|v| v >= version) {
                    continue;
                }
                match serde_json::from_str(&state) {
                    Ok(st) => {
                        self.set_bot_state(strategy, &key.1, st);
                        changed = true;
                    }
                    Err(e) => tracing::error!(strategy, bot = %key.1, error = %e, "ignoring a stored bot state"),
                }
                versions.insert(key, version);
            }
        }
        if changed {
            self.refresh_bots(strategy);
        }
    }

    /// Sets the deadlines of stored requests (before serving).
    pub fn with_freshness(mut self, freshness: Freshness) -> App {
        self.freshness = freshness;
        self
    }

    /// Starts committing a processed Outcome in a task of its own, so that the commit, the release of the key
    /// on failure and the dispatchers' wake-up happen whatever becomes of the request that carried the alert
    /// (a sender that hangs up makes hyper drop its handler, never this task). Until the task ends, a
    /// delivery of the same alert finds it with [`App::committing`].
    ///
    /// Call it in the same strategy turn as the `Engine::deliver` that processed the Outcome (the CPU pool
    /// runs one job per strategy at a time), so that no retry can be decided in between, and so that the alert's
    /// rows are queued for the writer here, before the next alert's (`App::queue_hand_off`): the dispatcher
    /// sends a bot's rows oldest first, so rows stored out of the alerts' order send a later MODIFY's price
    /// before an earlier one's, which then stands. Only the wait for the commit runs in the task.
    ///
    /// `now` is when the alert was decided, `received` when it arrived (see [`App::queue_hand_off`]).
    pub fn begin_hand_off(
        self: &Arc<Self>,
        rt: &tokio::runtime::Handle,
        outcome: Outcome,
        now: i64,
        received: i64,
    ) -> JoinHandle<Result<(), StoreError>> {
        let key =
            outcome.strategy.as_deref().map(str::to_owned).zip(outcome.dedup_key.as_deref().and_then(parse_hex_key));
        let (tx, rx) = watch::channel(None);
        let ours = rx.clone();
        if let Some(k) = &key {
            self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).insert(k.clone(), rx);
        }
        let queued = self.queue_hand_off(outcome, now, received);
        let app = Arc::clone(self);
        rt.spawn(async move {
            let res = crate::metrics::commit(app.hand_off_queued(queued)).await;
            // The key was given back (on failure) before this, so a retry that no longer finds the entry is
            // decided afresh. Such a retry may have claimed the key again and put its own entry here in between:
            // that one stays, so a copy answered duplicate still waits for its commit.
            if let Some(k) = key {
                app.end_hand_off(&k, &ours);
            }
            let _ = tx.send(Some(res.is_ok()));
            res
        })
    }

    /// Takes a finished hand-off's entry off [`App::committing`]'s map, unless a later hand-off of the same key
    /// has put its own there meanwhile.
    fn end_hand_off(&self, key: &(String, DedupKey), ours: &watch::Receiver<Option<bool>>) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if in_flight.get(key).is_some_and(|r| r.same_channel(ours)) {
            in_flight.remove(key);
        }
    }

    /// The commit still in progress of an alert that the engine answered `duplicate`, if there is one.
    pub fn committing(&self, strategy: &str, key: &DedupKey) -> Option<Committing> {
        let mut map = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let k = (strategy.to_owned(), *key);
        let rx = map.get(&k)?;
        // A task that ended without saying (it panicked) left its entry: the engine's answer stands.
        if rx.has_changed().is_err() && rx.borrow().is_none() {
            map.remove(&k);
            return None;
        }
        map.get(&k).cloned()
    }

    /// Sets the bots' delivery configuration (before serving).
    pub fn with_bots(mut self, bots: Bots) -> App {
        self.bots = bots;
        self
    }

    /// A bot's current state (empty when the server has none).
    pub fn bot_state(&self, strategy: &str, bot: &str) -> BotState {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states.get(&(strategy.to_owned(), bot.to_owned())).cloned().unwrap_or_default()
    }

    /// Replaces a bot's state in memory only if it is still `expected`; says whether it did (the caller stores it,
    /// then calls [`App::refresh_bots`]). A state read from another broker or account than the bot's now is not
    /// taken ([`App::state_fits`]): the bot's sync is asked to read its account again.
    pub fn replace_bot_state(&self, strategy: &str, bot: &str, expected: &BotState, state: BotState) -> bool {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let key = (strategy.to_owned(), bot.to_owned());
        // No state yet is the empty one, as [`App::bot_state`] reads it.
        if states.get(&key).map_or(*expected != BotState::default(), |now| now != expected) {
            return false;
        }
        // Checked under the states lock, which a strategy's reload holds while it changes the bot's account: a
        // read of the old account that finishes during the reload either lands before it (and is dropped by it)
        // or is refused here.
        if self.refused_now(strategy, bot, &state) {
            drop(states);
            self.sync.poke(strategy, bot);
            return false;
        }
        states.insert(key, state);
        true
    }

    /// [`App::set_bot_state`] by a delivery whose commit is yet to be queued and to land: counted until
    /// [`App::state_committed`].
    pub fn set_bot_state_committing(&self, strategy: &str, bot: &str, state: BotState) {
        let key = (strategy.to_owned(), bot.to_owned());
        *self.committing_states.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default() += 1;
        self.set_bot_state(strategy, bot, state);
    }

    /// [`App::set_bot_state_committing`] only if the state is still `expected` (what the delivery read); says
    /// whether it did. A state the operator set between the read and this is not overwritten: the delivery is
    /// applied again to it.
    pub fn replace_bot_state_committing(
        &self,
        strategy: &str,
        bot: &str,
        expected: &BotState,
        state: BotState,
    ) -> bool {
        let key = (strategy.to_owned(), bot.to_owned());
        *self.committing_states.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default() += 1;
        if self.replace_bot_state(strategy, bot, expected, state) {
            return true;
        }
        self.state_committed(strategy, bot, false);
        false
    }

    /// One state of [`App::set_bot_state_committing`] is committed (or will never be: `all` forgets them all,
    /// after the bot's dispatcher failed and its state was read back from the database).
    pub fn state_committed(&self, strategy: &str, bot: &str, all: bool) {
        let key = (strategy.to_owned(), bot.to_owned());
        let mut pending = self.committing_states.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = pending.get_mut(&key) {
            *n = if all { 0 } else { n.saturating_sub(1) };
            if *n == 0 {
                pending.remove(&key);
            }
        }
    }

    /// The bot's state once no delivery's state of it is waiting for its commit (deliveries commit in
    /// milliseconds), or `None` if one still is after `within`. A state set over one still committing would be
    /// written into the database after it, and under it in memory.
    pub async fn settled_state(&self, strategy: &str, bot: &str, within: std::time::Duration) -> Option<BotState> {
        let until = tokio::time::Instant::now() + within;
        loop {
            let state = self.bot_state(strategy, bot);
            if !self.state_committing(strategy, bot) {
                return Some(state);
            }
            if tokio::time::Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Whether a delivery's state of the bot is set in memory and not yet committed.
    pub fn state_committing(&self, strategy: &str, bot: &str) -> bool {
        let pending = self.committing_states.lock().unwrap_or_else(|e| e.into_inner());
        pending.contains_key(&(strategy.to_owned(), bot.to_owned()))
    }

    /// Replaces a bot's state in memory (the caller stores it, then calls [`App::refresh_bots`]). A state read
    /// from another broker or account than the bot's now (a stored one another server wrote before the bot's
    /// account was edited, say) leaves the bot with no known state instead, and its sync is asked to read the
    /// account. A state set before its strategy is loaded (at start-up) is checked when it loads
    /// ([`App::apply_snapshot`]).
    pub fn set_bot_state(&self, strategy: &str, bot: &str, state: BotState) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let key = (strategy.to_owned(), bot.to_owned());
        if self.refused_now(strategy, bot, &state) {
            states.remove(&key);
            drop(states);
            self.sync.poke(strategy, bot);
            return;
        }
        states.insert(key, state);
    }

    /// Where a bot is configured to trade now, to stamp a state made now with ([`BotState::source`]), marked as the
    /// paper broker's where the bot is delivered on paper; `None` when its strategy is not loaded or has no such
    /// bot.
    pub fn state_source(&self, strategy: &str, bot: &str) -> Option<StateSource> {
        let s = self.engine.strategy(strategy)?;
        s.bots.iter().find(|b| &*b.id == bot).map(|b| self.source_of(b))
    }

    /// Where `bot`, as configured, trades now: its broker and account, through its delivery (paper or a target).
    fn source_of(&self, bot: &strategy_webhook::strategy::Bot) -> StateSource {
        let paper = matches!(self.bots.get(&bot.id), crate::bots::Delivery::Paper);
        StateSource { paper, target: Some(self.bots.target(&bot.id).to_owned()), ..StateSource::of(bot) }
    }

    /// Whether `state` may be used for the bot as it is configured now: not when it was read from another broker,
    /// or from another account of a broker whose requests name the account ([`StateSource::fits`]), which is
    /// logged at WARN. A state with no source (stored by an earlier version), a paper bot's (its account is a
    /// name), and one of a strategy not loaded are used as they are.
    pub fn state_fits(&self, strategy: &str, bot: &str, state: &BotState) -> bool {
        !self.refused_now(strategy, bot, state)
    }

    /// [`App::refuses`] against the strategy as loaded now; the strategy is looked up only for a state with a
    /// source, of an http bot (a delivery sets the state of every bot, paper bots' at each fill).
    fn refused_now(&self, strategy: &str, bot: &str, state: &BotState) -> bool {
        state.source.is_some()
            && matches!(self.bots.get(bot), crate::bots::Delivery::Http(_))
            && self.engine.strategy(strategy).is_some_and(|s| self.refuses(&s, bot, state))
    }

    /// Whether `state` was read elsewhere than where `s`'s bot trades now (an http bot's), logging why once: used,
    /// a CLOSE would send the old account's quantity to the new one, and a CANCEL or MODIFY would name the old
    /// account's order ids there.
    fn refuses(&self, s: &Strategy, bot: &str, state: &BotState) -> bool {
        let Some(source) = &state.source else { return false };
        let Some(cfg) = s.bots.iter().find(|b| &*b.id == bot) else { return false };
        let here = self.bots.target(bot);
        // Where the broker's paths name no account (the keys pick it), only the target (its URL and keys) tells a
        // paper-trading account's state from a live one's, and one account's from another's: a state stamped before
        // targets were recorded cannot say where it was read, and is read anew rather than sold at an account that
        // may not hold it.
        let keys_pick_account = !cfg.broker.broker().names_account();
        let unknown_target = source.target.is_none() && keys_pick_account;
        let moved = unknown_target || crate::bots::stored_elsewhere(source.target.as_deref(), here, keys_pick_account);
        if (source.fits(cfg) && !moved) || !matches!(self.bots.get(bot), crate::bots::Delivery::Http(_)) {
            return false;
        }
        tracing::warn!(strategy = %s.id, bot, read_from_broker = %source.broker, read_from_account = %source.account,
            broker = cfg.broker.as_str(), account = %cfg.account_id,
            paper_book = source.paper, read_from = source.target.as_deref().unwrap_or("-"), target = here,
            "a state of the bot from another account than its own now (or the paper broker's book) is not used; \
             its account is read anew");
        true
    }

    /// The product increments last read for a bot (empty when none were).
    pub fn bot_increments(&self, strategy: &str, bot: &str) -> BTreeMap<String, ProductIncrements> {
        let inc = self.increments.lock().unwrap_or_else(|e| e.into_inner());
        inc.get(&(strategy.to_owned(), bot.to_owned())).cloned().unwrap_or_default()
    }

    /// Replaces the product increments read for a bot (the caller then calls [`App::refresh_bots`]).
    pub fn set_bot_increments(&self, strategy: &str, bot: &str, read: BTreeMap<String, ProductIncrements>) {
        let mut inc = self.increments.lock().unwrap_or_else(|e| e.into_inner());
        inc.insert((strategy.to_owned(), bot.to_owned()), read);
    }

    /// Unloads a strategy (its file deleted, or now defining another id), in the order of [`App::refresh_bots`]:
    /// unloaded between a refresh's read of the strategy and its upsert, the strategy was installed again, token
    /// and all, and went on trading after its file was deleted.
    pub fn unload(&self, id: &str) -> bool {
        let _overrides = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
        self.engine.unload(id)
    }

    /// The token rotated to strategy `id` through the admin API, if any: it answers in place of its file's.
    pub fn rotated_token(&self, id: &str) -> Option<String> {
        let overrides = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
        overrides.get(id).map(|t| t.as_str().to_owned())
    }

    /// Puts the server's bot states into a strategy's live snapshot, so the engine decides against them.
    /// `Engine::upsert` keeps the strategy's dedup and rate state.
    pub fn refresh_bots(&self, id: &str) {
        // The overrides lock orders this against a rotation, so neither undoes the other's token.
        let _overrides = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
        let Some(current) = self.engine.strategy(id) else { return };
        let mut s = (*current).clone();
        self.overlay(&self.states.lock().unwrap_or_else(|e| e.into_inner()), &mut s);
        #[cfg(test)]
        std::thread::sleep(std::time::Duration::from_micros(
            tests::REFRESH_PAUSE_US.load(std::sync::atomic::Ordering::Relaxed),
        ));
        if let Err(e) = self.engine.upsert(s) {
            tracing::error!(strategy = id, error = %e, "updating the bots' positions failed");
        }
    }

    /// Puts `states` (the server's, locked by the caller) and the increments read into `s`'s bots.
    fn overlay(&self, states: &HashMap<(String, String), BotState>, s: &mut Strategy) {
        for bot in &mut s.bots {
            if let Some(st) = states.get(&(s.id.to_string(), bot.id.to_string())) {
                match st.to_core() {
                    Ok((positions, orders)) => {
                        bot.positions = positions;
                        bot.working_orders = orders;
                    }
                    Err(e) => tracing::error!(strategy = %s.id, bot = %bot.id, error = %e, "bad stored bot state"),
                }
            } else if matches!(self.bots.get(&bot.id), crate::bots::Delivery::Http(_)) {
                // The file's lists are a paper book's seed: a bot switched from paper to a broker, its account not
                // read yet, had a CLOSE of the simulated position sent to the real account (selling shares held
                // for other reasons, or opening a short). Until its account is read it holds nothing known.
                bot.positions.clear();
                bot.working_orders.clear();
            }
        }
        let increments = self.increments.lock().unwrap_or_else(|e| e.into_inner());
        for bot in &mut s.bots {
            if let Some(read) = increments.get(&(s.id.to_string(), bot.id.to_string())) {
                // What the broker publishes wins over a pair the file names in another spelling.
                bot.increments.retain(|k, _| !read.keys().any(|r| same_pair(k, r)));
                bot.increments.extend(read.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
    }

    /// Queues the commit of a processed Outcome (outbox rows, dedup key, rate mark, log rows) at once, in the
    /// strategy's turn, so that alerts handed off one after the other are stored (and sent) in that order; its
    /// end is awaited by [`App::hand_off_queued`]. `None` for an Outcome of no strategy (nothing to store).
    ///
    /// Each row stores its request's neutral order as the Outcome gave it (`OrderRequest::order`), so the
    /// paper broker and the state tracking apply what was decided, never a decision made again later.
    ///
    /// The rows' deadlines count from `received`, when the alert arrived, not from `now`, its decision: an alert
    /// that waited for its strategy's turn (alerts queued ahead of it, a slow decision) had that wait added to
    /// its market orders' life. The rows and the Logs row are stamped with it too (the Logs view finds an
    /// alert's requests by that time); the rate mark keeps `now`, where the engine counted it.
    fn queue_hand_off(&self, mut outcome: Outcome, now: i64, received: i64) -> Option<QueuedHandOff> {
        let strategy = outcome.strategy.clone()?;
        let key = outcome.dedup_key.map(|k| k.to_string()).unwrap_or_default();
        let received = received.min(now);
        let entries = self.mark_entries(&strategy, &outcome);
        let rows = self.outbox_rows(&strategy, &mut outcome, received);
        let mut bots: Vec<String> = rows.iter().map(|r| r.bot.clone()).collect();
        bots.dedup();
        let mark = Mark { strategy: strategy.to_string(), ts_ms: now, key: Some(key.clone()) };
        let entry = LogEntry::from_outcome(outcome, received);
        let alerts = entry.as_ref().map(|e| e.alerts.clone());
        let committed = self.writer.queue_outbox(mark, rows, entry, self.freshness.commit_delay);
        Some(QueuedHandOff { strategy, key, bots, alerts, received, committed, entries })
    }

    /// Marks the orders a processed Outcome places for its http bots, entries and exits (`read_back.rs`), here in
    /// its strategy's turn: an alert decided after it cannot miss them. Says their client order ids. Not on a shared
    /// database (another server may deliver the rows and read the account, and nothing here would clear the marks).
    fn mark_entries(&self, strategy: &str, outcome: &Outcome) -> Vec<String> {
        let mut marked = Vec::new();
        if self.shared.is_some() || !self.read_back.enabled() {
            return marked;
        }
        // One instrument an alert (a reversal's two steps trade the same).
        let step = |action| outcome.alerts.iter().find(|a| a.action == ActionKind::Canonical(action));
        for o in outcome.orders.iter().filter(|o| o.kind == RequestKind::Place) {
            let action = if o.order.intent.is_open() { Action::Open } else { Action::Close };
            let Some(a) = step(action).or(outcome.alerts.last()) else { break };
            if !matches!(self.bots.get(&o.bot), crate::bots::Delivery::Http(_)) {
                continue;
            }
            let key = strategy_webhook::InstrumentKey::new(&a.instrument, o.order.asset_class);
            self.read_back.entered(strategy, &o.bot, key, o.order.intent.direction(), o.client_order_id.as_str());
            marked.push(o.client_order_id.to_string());
        }
        marked
    }

    /// Waits for the commit queued by [`App::queue_hand_off`], then wakes the alert's bots' dispatchers. On failure
    /// the dedup key is given back, so the sender's retry is processed once.
    async fn hand_off_queued(self: &Arc<Self>, queued: Option<QueuedHandOff>) -> Result<(), StoreError> {
        let Some(QueuedHandOff { strategy, key, bots, alerts, received, committed, entries }) = queued else {
            return Ok(());
        };
        let res = match committed {
            Ok(done) => done.await.unwrap_or(Err(StoreError::Unanswered)),
            Err(e) => Err(e),
        };
        match res {
            Ok(()) => {
                for bot in bots {
                    self.dispatcher.wake(self, &strategy, &bot);
                }
                Ok(())
            }
            Err(e) => {
                self.engine.release(&strategy, &key);
                self.read_back.not_stored(&strategy, &entries);
                // The alert's rows went with the rolled-back commit: the Logs still say what became of it.
                self.writer.log(Some(LogEntry::not_stored(&strategy, alerts, &e, received)), None).await;
                Err(e)
            }
        }
    }

    /// The outbox rows of a processed Outcome (its orders are taken out of it), stamped `received` (the alert's
    /// arrival, where their deadlines count from). Each row records where its bot is delivered now, the only
    /// place the dispatcher will send it.
    pub fn outbox_rows(&self, strategy: &str, outcome: &mut Outcome, received: i64) -> Vec<OutboxRow> {
        // A MODIFY places an order only as a re-size's new order, standing in for the one its cancel pulls (at a
        // broker whose change cannot carry a size); an entry placed after `cancel: true` pulled the working entries
        // stands in for them too (a CANCEL decided meanwhile pulls it). A close waiting for the pull of the
        // position's exit stands in for nothing. Marked in the row's order ([`crate::dispatch::stands_in`]): told
        // apart by equal terms, a re-size that also moved the price was taken for no stand-in, and a CANCEL or CLOSE
        // decided meanwhile missed the new order.
        let modify = !outcome.alerts.is_empty()
            && outcome.alerts.iter().all(|a| a.action == ActionKind::Canonical(Action::Modify));
        // A cancel's order carries what remained of the working order, not its whole size: an edit that keeps the
        // id and changes the size, delivered before the cancel, made "remained then less remains now" read as a
        // fill. Its size then, filled part included, is stored with it ([`crate::dispatch::mark_size_at_decision`])
        // from the book the engine decided on, where that still holds the order as the cancel has it: one a read
        // changed since the decision is left unmarked, and measured as before.
        let live = self.engine.strategy(strategy);
        let size_then = |o: &OrderRequest| {
            let bot = live.as_ref()?.bots.iter().find(|b| b.id == o.bot)?;
            let w = bot.working_orders.iter().find(|w| Some(w.id.as_str()) == o.order_id.as_deref())?;
            (w.quantity == o.order.quantity).then(|| w.quantity.checked_add(w.filled)).flatten()
        };
        // A replace's order carries what is to remain working, decided from the book's last read of the order. Where
        // the replace is a new order stating its size (the old one keeping its fills), an order that filled in part
        // since that read grew the position by the fills; the whole size the change means, filled part included, is
        // stored with it, for the size sent to be what remains of it as the broker reads the order just before
        // ([`crate::dispatch::mark_replace`]). Whether the change re-sizes the order is stored too: a change
        // re-aimed at the order that replaced its own keeps that order's size only where it did not.
        let replace_then = |o: &OrderRequest| {
            let bot = live.as_ref()?.bots.iter().find(|b| b.id == o.bot)?;
            let w = bot.working_orders.iter().find(|w| Some(w.id.as_str()) == o.order_id.as_deref())?;
            let states_size = o.keeps_order_id == Some(false) && o.broker.broker().replace_changes_quantity();
            let filled = w.filled.checked_mul(strategy_webhook::builder::option::held_factor(&w.legs).into());
            let whole = states_size.then(|| filled.and_then(|f| o.order.quantity.checked_add(f))).flatten();
            Some((w.quantity != o.order.quantity, whole))
        };
        std::mem::take(&mut outcome.orders)
            .into_iter()
            .map(|o| OutboxRow {
                id: 0,
                target: Some(self.bots.target(&o.bot).to_owned()),
                deadline_ms: self.freshness.deadline(o.kind, Some(o.order.order_type), received),
                meaning: serde_json::to_string(&o.order).ok().map(|m| match (o.kind, &o.after) {
                    (RequestKind::Place, Some(_)) => {
                        crate::dispatch::mark_stands_in(m, modify || o.order.intent.is_open(), modify)
                    }
                    (RequestKind::Cancel, _) => match size_then(&o) {
                        Some(size) => crate::dispatch::mark_size_at_decision(m, size),
                        None => m,
                    },
                    (RequestKind::Replace, _) => match replace_then(&o) {
                        Some((resized, whole)) => crate::dispatch::mark_replace(m, resized, whole),
                        None => m,
                    },
                    _ => m,
                }),
                strategy: strategy.to_owned(),
                broker: o.broker.as_str().to_owned(),
                kind: match o.kind {
                    RequestKind::Place => "place",
                    RequestKind::Replace => "replace",
                    RequestKind::Cancel => "cancel",
                }
                .to_owned(),
                client_order_id: o.client_order_id.to_string(),
                order_id: o.order_id,
                keeps_order_id: o.keeps_order_id,
                after: o.after.map(String::from),
                method: o.request.method.as_str().to_owned(),
                path: o.request.path.to_string(),
                content_type: o.request.content_type.map(str::to_owned),
                body: o.request.body.to_bytes(),
                bot: o.bot.to_string(),
                status: "pending".into(),
                created_ms: received,
                retried: false,
                // The store sets it, as it inserts the row beside its alert's log rows.
                alert_log: None,
            })
            .collect()
    }

    /// Loads a snapshot into the engine, with the strategy's rotated token if it has one. Returns its id.
    #[cfg(test)]
    pub fn apply_snapshot(&self, bytes: &[u8]) -> Result<String, SnapshotRefused> {
        self.apply_snapshot_replacing(bytes, None)
    }

    /// [`App::apply_snapshot`] for a file whose previous version defined strategy `replacing`, unloaded once this
    /// one loads: its bots are no other strategy's ([`App::check_accounts`]). Counted as one, a file edited to
    /// another id was refused for its own previous version's account, for good.
    pub fn apply_snapshot_replacing(&self, bytes: &[u8], replacing: Option<&str>) -> Result<String, SnapshotRefused> {
        let mut s = Strategy::from_json(bytes).map_err(EngineError::from)?;
        let id = s.id.to_string();
        let overrides = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
        // During a rotation's commit (its pin) the file's own token is checked as if it went live, and kept for the
        // rotation's failure once this version has loaded: kept before the checks, a failed rotation put live a
        // token they refuse (the published demo token on a bot at a broker).
        let pinned = self.pins.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&id);
        let file_token = s.token_hash.clone();
        // A rotated token wins over the file's, which is then not checked; a pin is checked as the file's.
        let rotated = overrides.get(&id).filter(|_| !pinned).cloned();
        match rotated {
            Some(t) => s.token_hash = t,
            None => {
                if let Some(from) = self.retired.lock().unwrap_or_else(|e| e.into_inner()).get(&file_token) {
                    return Err(SnapshotRefused::Retired { strategy: from.clone() });
                }
            }
        }
        // The bundled demo's token is printed in the README and the docs: with a bot delivered to a broker, anyone
        // who read them could trade that account. The demo's way to real trading (a bot switched to http) must not
        // keep it.
        if published_on_a_broker(&s, &self.bots) {
            return Err(SnapshotRefused::PublishedToken);
        }
        if pinned {
            if let Some(t) = overrides.get(&id) {
                s.token_hash = t.clone();
            }
        }
        // Under the `overrides` lock, as every load is: two strategies loaded at once could each miss the other.
        self.check_accounts(&s, replacing)?;
        // A bot moved to another account (or broker) holds nothing known there yet: its state read from the old
        // account is dropped before the strategy goes live, and its sync asked to read the new one now. Kept, a
        // CLOSE sent the old account's quantity to the new one, and cancelled the old account's order ids there.
        // So is a state whose source is not the bot's account as this file configures it, whether the strategy
        // was loaded before or not: one loaded at start-up after the account was edited with the server
        // stopped, or stored by a read of the old account that finished after the edit.
        let moved = self.engine.strategy(&id).map_or_else(Vec::new, |old| moved_bots(&old, &s));
        // Held until the strategy is live: a state set meanwhile is checked against the account the engine has.
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let mut dropped = Vec::new();
        for bot in &s.bots {
            let key = (id.clone(), bot.id.to_string());
            let http = matches!(self.bots.get(&bot.id), crate::bots::Delivery::Http(_));
            if http && moved.iter().any(|m| *m == *bot.id) {
                tracing::warn!(strategy = %id, bot = %bot.id, "the bot's account changed: its state is read anew");
            } else if !states.get(&key).is_some_and(|st| self.refuses(&s, &bot.id, st)) {
                continue;
            }
            if let Some(st) = states.remove(&key) {
                dropped.push((key, st));
            }
        }
        // A paper bot without a book yet starts from what the file lists: the engine decides against the file's
        // positions until the bot has a state, and the paper broker must fill against the same (an empty book
        // refused the CLOSE the engine had answered processed). From its first fill the book is stored and the
        // file's lists are not read again for it.
        let mut seeded = Vec::new();
        for bot in &s.bots {
            let key = (id.clone(), bot.id.to_string());
            let paper = matches!(self.bots.get(&bot.id), crate::bots::Delivery::Paper);
            if paper && !states.contains_key(&key) && !(bot.positions.is_empty() && bot.working_orders.is_empty()) {
                states.insert(key.clone(), BotState::from_file(bot, self.source_of(bot)));
                seeded.push(key);
            }
        }
        // The server's positions and working orders win over the file's: they are what the bots hold now.
        self.overlay(&states, &mut s);
        if let Err(e) = self.engine.upsert(s) {
            // Not loaded: the bots keep the account they had, and with it their states.
            for key in seeded {
                states.remove(&key);
            }
            states.extend(dropped);
            return Err(e.into());
        }
        drop(states);
        if pinned {
            if let Some(edited) = self.pins.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&id) {
                *edited = Some(file_token);
            }
        }
        for bot in moved.iter().chain(dropped.iter().map(|((_, b), _)| b)) {
            self.sync.poke(&id, bot);
        }
        Ok(id)
    }

    /// Refuses a snapshot with a bot delivered to the same broker account as another of its bots, or as a bot of
    /// another loaded strategy that may trade one of its instruments ([`crate::sync::shared_instrument`]). Each
    /// bot's sync reads the whole account, keeping what its strategy trades, as the bot's own: two bots of one
    /// strategy there each held the other's position, and one CLOSE sold it twice; a strategy that bought nothing
    /// was handed another's position, and its CLOSE sold it. The core refuses two bots on an account the paths
    /// name; where the keys pick it, only the bots file tells ([`Bots::account`]). Paper bots share nothing.
    fn check_accounts(&self, s: &Strategy, replacing: Option<&str>) -> Result<(), SnapshotRefused> {
        let accounts: Vec<_> = s.bots.iter().map(|b| self.bots.account(&b.id, b.broker, &b.account_id)).collect();
        let mut others = self.engine.strategies();
        others.retain(|o| o.id != s.id && Some(&*o.id) != replacing);
        // In id order, so that the same strategy is named every time.
        others.sort_by(|a, b| a.id.cmp(&b.id));
        let named = |b: &strategy_webhook::strategy::Bot| AccountNamed {
            broker: b.broker.as_str(),
            account_id: b.broker.broker().names_account().then(|| b.account_id.trim().to_owned()),
            target: self.bots.target(&b.id).to_owned(),
        };
        for (i, (bot, account)) in s.bots.iter().zip(&accounts).enumerate() {
            let Some(account) = account else { continue };
            if let Some((first, _)) = s.bots[..i].iter().zip(&accounts).find(|(_, a)| a.as_ref() == Some(account)) {
                return Err(SnapshotRefused::TwoBotsOneAccount(Box::new(TwoBotsOneAccount {
                    index: i,
                    bot: bot.id.to_string(),
                    other: first.id.to_string(),
                    account: named(bot),
                })));
            }
            for other in &others {
                for theirs in &other.bots {
                    if self.bots.account(&theirs.id, theirs.broker, &theirs.account_id).as_ref() != Some(account) {
                        continue;
                    }
                    if let Some(instrument) = crate::sync::shared_instrument((s, bot), (other, theirs)) {
                        return Err(SnapshotRefused::SharedAccount(Box::new(SharedAccount {
                            strategy: s.id.to_string(),
                            bot: bot.id.to_string(),
                            other: other.id.to_string(),
                            other_bot: theirs.id.to_string(),
                            account: named(bot),
                            instrument,
                        })));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether a snapshot's strategy has a state stored for a bot of it delivered to a broker: it has traded there.
    /// At start such a strategy loads first ([`crate::reload::Loader::scan`]), so that of two stored strategies on
    /// one account ([`App::check_accounts`]) the one holding its positions keeps it.
    pub fn has_traded(&self, bytes: &[u8]) -> bool {
        let Ok(s) = Strategy::from_json(bytes) else { return false };
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        s.bots.iter().any(|b| {
            matches!(self.bots.get(&b.id), crate::bots::Delivery::Http(_))
                && states.contains_key(&(s.id.to_string(), b.id.to_string()))
        })
    }

    /// Gives a strategy a new random token, committed to the database before it takes effect, and returns
    /// it. The old token answers 404 from the moment this returns, and after a restart too.
    pub async fn rotate(&self, id: &str) -> Result<TokenHash, RotateError> {
        let _one_at_a_time = self.rotating.lock().await;
        // The live token, pinned until the commit ends: a reload applying an edited file meanwhile keeps it, as it
        // keeps a rotated token. Unpinned, the file's new token went live during the commit, outlived the rotation
        // unretired, and a copy of the file naming it took the webhook the rotation was meant to shut.
        let (current, pinned) = {
            let mut overrides = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
            let Some(current) = self.engine.strategy(id).map(|s| s.token_hash.clone()) else {
                return Err(RotateError::Unknown);
            };
            let pinned = !overrides.contains_key(id);
            if pinned {
                overrides.insert(id.to_owned(), current.clone());
                self.pins.lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_owned(), None);
            }
            (current, pinned)
        };
        // A failed rotation: the pin goes, and a token the file was edited to meanwhile goes live, as it would have
        // without the rotation (kept out, the old token stayed live while the file named another, and the file was
        // not read again until it changed).
        let unpin = || {
            let mut overrides = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
            let edited = self.pins.lock().unwrap_or_else(|e| e.into_inner()).remove(id).flatten();
            if !pinned || overrides.get(id) != Some(&current) {
                return;
            }
            overrides.remove(id);
            let Some(edited) = edited.filter(|t| *t != current) else { return };
            if let Some(from) = self.retired.lock().unwrap_or_else(|e| e.into_inner()).get(&edited) {
                tracing::error!(strategy = id, retired_from = %from, "the token its file was edited to during a failed rotation was rotated away before; the previous token stays live");
                return;
            }
            let published = self.engine.strategy(id).is_some_and(|s| {
                let mut as_edited = (*s).clone();
                as_edited.token_hash = edited.clone();
                published_on_a_broker(&as_edited, &self.bots)
            });
            if published {
                tracing::error!(strategy = id, "the token its file was edited to during a failed rotation is the published demo token; the previous token stays live");
                return;
            }
            match self.engine.rotate(id, edited) {
                Ok(()) => {
                    tracing::info!(strategy = id, "the token its file was edited to during a failed rotation is live")
                }
                Err(e) => {
                    tracing::error!(strategy = id, error = %e, "the token its file was edited to during a failed rotation was refused; the previous token stays live")
                }
            }
        };
        let token = match random_token() {
            Ok(t) => t,
            Err(e) => {
                unpin();
                return Err(RotateError::Token(e));
            }
        };
        // Durable first: a token that answered once must survive a crash.
        if let Err(e) = self.writer.set_token(id, token.as_str(), current.as_str(), now_ms()).await {
            unpin();
            // A commit sent and not confirmed (a synchronous standby away, the connection cut) may land later,
            // and then only the new token answers, on every server: the operator must have it.
            if e.commit_unconfirmed() {
                return Err(RotateError::Unconfirmed { token, source: e });
            }
            return Err(RotateError::Store(e));
        }
        let mut overrides = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
        // Committed: memory follows the database whatever the engine says, so that a strategy unloaded during
        // the commit comes back with the stored token, as it will after a restart.
        overrides.insert(id.to_owned(), token.clone());
        self.pins.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
        self.retired.lock().unwrap_or_else(|e| e.into_inner()).insert(current, id.to_owned());
        self.token_changed.lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_owned(), std::time::Instant::now());
        match self.engine.rotate(id, token.clone()) {
            Ok(()) => {}
            // Unloaded during the commit (its file removed or renamed meanwhile): the rotation holds all the same,
            // the old token is retired and the strategy answers the new one when it loads again. Answered 404,
            // the operator never learned the new token, and the senders of the old URL were refused.
            Err(EngineError::UnknownStrategy(_)) => {
                tracing::warn!(strategy = id, "the strategy was unloaded during its rotation; the new token holds");
            }
            Err(other) => return Err(RotateError::Engine(other.to_string())),
        }
        Ok(token)
    }

    /// Queues an Outcome's log rows (if it has any) and its trace in the dedup and rate windows for the
    /// database, without waiting: losing them in a crash costs at most a slightly shorter window.
    pub async fn record(&self, outcome: Outcome, ts_ms: i64) {
        let (entry, mark) = Self::trace(outcome, ts_ms);
        self.writer.log(entry, mark).await;
    }

    /// [`App::record`] in the strategy's turn, where the alert was decided: its log rows are queued behind those of
    /// the alerts decided before it and ahead of the next ones, so their ids keep the order of the decisions, which
    /// tells an outbox row's later alerts ([`crate::store::later_alerts`]). Recorded from a task of its own, a
    /// rejected CLOSE decided before an entry could be logged after it and be taken for a later alert.
    pub fn record_in_turn(&self, outcome: Outcome, ts_ms: i64) {
        let (entry, mark) = Self::trace(outcome, ts_ms);
        self.writer.log_in_turn(entry, mark);
    }

    /// An Outcome's log rows and its trace in the dedup and rate windows.
    fn trace(outcome: Outcome, ts_ms: i64) -> (Option<LogEntry>, Option<Mark>) {
        // Every delivery that reached the rate step was counted; 413 and 429 were not.
        let counted = outcome.strategy.is_some() && !matches!(outcome.http_status, 413 | 429);
        let keeps_key = matches!(outcome.decision, Decision::Processed | Decision::Rejected);
        let mark = match (&outcome.strategy, counted) {
            (Some(s), true) => Some(Mark {
                strategy: s.to_string(),
                ts_ms,
                key: outcome.dedup_key.map(|k| k.to_string()).filter(|_| keeps_key && outcome.http_status == 200),
            }),
            _ => None,
        };
        (LogEntry::from_outcome(outcome, ts_ms), mark)
    }

    /// The webhook URL for a token.
    pub fn webhook_url(&self, token: &TokenHash) -> String {
        format!("{}/webhooks/{}", self.public_url, token.as_str())
    }
}

/// Why a strategy file was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotRefused {
    /// The core refused it.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// It answers the bundled demo's published token and delivers a bot to a broker.
    #[error(
        "its token_hash is the bundled demo's, printed in the README and the docs, and a bot of it trades at a \
         broker: anyone could send it alerts; give the file a token_hash of its own (or rotate the token while its \
         bots are on paper)"
    )]
    PublishedToken,
    /// It names a token rotated away.
    #[error(
        "its token_hash was rotated away from strategy {strategy} through the admin API and answers no more; \
         give the file a new token_hash (or rotate the strategy's token once it is loaded)"
    )]
    Retired {
        /// The strategy the token was rotated away from.
        strategy: String,
    },
    /// Two of its bots are delivered to one account where the credentials pick it.
    #[error(transparent)]
    TwoBotsOneAccount(Box<TwoBotsOneAccount>),
    /// A bot of it is delivered to the account of another loaded strategy's bot, and their instruments may overlap.
    #[error(transparent)]
    SharedAccount(Box<SharedAccount>),
}

/// Whether strategy `s` answers the bundled demo's published token with a bot delivered to a broker: anyone who read
/// the README could trade that account.
fn published_on_a_broker(s: &Strategy, bots: &Bots) -> bool {
    s.token_hash.as_str() == PUBLISHED_DEMO_TOKEN
        && s.bots.iter().any(|b| matches!(bots.get(&b.id), crate::bots::Delivery::Http(_)))
}

/// [`SnapshotRefused::TwoBotsOneAccount`].
#[derive(Debug, thiserror::Error)]
#[error(
    "`bots[{index}]` {bot:?} trades the same {account} as bot {other:?}: the bots file delivers both {}, and where \
     the keys pick the account `account_id` is only a label; each would send every order and read the whole \
     account as its own",
    crate::bots::where_to(&account.target)
)]
pub struct TwoBotsOneAccount {
    /// The later bot's index in `bots`.
    pub index: usize,
    /// The later bot.
    pub bot: String,
    /// The bot before it on the same account.
    pub other: String,
    /// The account.
    pub account: AccountNamed,
}

/// [`SnapshotRefused::SharedAccount`].
#[derive(Debug, thiserror::Error)]
#[error(
    "bot {bot:?} of strategy {strategy:?} trades the same {account} as bot {other_bot:?} of strategy {other:?} \
     (both delivered {}), and {}: each would read the other's positions and orders there as its own, and a CLOSE \
     would sell what the other bought; give the bot an account of its own, or the strategies instruments that do \
     not overlap",
    crate::bots::where_to(&account.target),
    both_trade(instrument)
)]
pub struct SharedAccount {
    /// The strategy refused.
    pub strategy: String,
    /// Its bot.
    pub bot: String,
    /// The loaded strategy already trading the account.
    pub other: String,
    /// That strategy's bot.
    pub other_bot: String,
    /// The account.
    pub account: AccountNamed,
    /// An instrument both may trade (`*` when one allows any).
    pub instrument: String,
}

/// A broker account as an error names it: the broker's name and `account`, then the `account_id` where the
/// paths name the account.
#[derive(Debug)]
pub struct AccountNamed {
    broker: &'static str,
    /// The `account_id`, where the broker's paths name the account (elsewhere it is a label).
    account_id: Option<String>,
    /// Where the bot is delivered ([`crate::bots::Delivery::target`]).
    target: String,
}

impl std::fmt::Display for AccountNamed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.account_id {
            Some(id) => write!(f, "{} account {id:?}", self.broker),
            None => write!(f, "{} account", self.broker),
        }
    }
}

/// What two strategies sharing an account may both trade, in an error's words.
fn both_trade(instrument: &str) -> String {
    if instrument == "*" {
        "one of them allows any instrument (\"*\")".to_owned()
    } else {
        format!("both may trade {instrument}")
    }
}

/// Why a rotation failed.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    /// No strategy has that id.
    #[error("no strategy has this id")]
    Unknown,
    /// No random token could be made.
    #[error("no token could be made: {0}")]
    Token(String),
    /// The new token could not be stored; the old one still answers.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine refused the new token.
    #[error("the engine refused the token: {0}")]
    Engine(String),
    /// The database did not confirm the new token's commit: it may have been stored, and then only `token`
    /// answers.
    #[error("the database did not confirm that the new token was stored ({source})")]
    Unconfirmed {
        /// The new token, which answers if the commit landed.
        token: TokenHash,
        /// Why the commit is unconfirmed.
        source: StoreError,
    },
}

/// A fresh token: 32 bytes from the operating system's generator, as 64 lowercase hex characters.
pub fn random_token() -> Result<TokenHash, String> {
    let hex = random_hex()?;
    TokenHash::parse(hex.as_bytes()).ok_or_else(|| "generated token has the wrong shape".to_owned())
}

/// 32 random bytes as 64 lowercase hex characters.
pub fn random_hex() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| format!("no randomness available: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether two spellings name the same crypto pair (`BTC-USD`, `BTC/USD`).
fn same_pair(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b) || CryptoPair::parse(a).is_some_and(|p| CryptoPair::parse(b).as_ref() == Some(&p))
}

/// Now, in Unix milliseconds: the core takes time as an argument.
pub fn now_ms() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    now.saturating_add(CLOCK_OFFSET_MS.load(std::sync::atomic::Ordering::Relaxed))
}

/// Tests only (`--test-clock-offset-ms`): how far this server's clock reads off the machine's, so that servers on
/// one machine can have clocks a few seconds apart. Zero otherwise.
pub static CLOCK_OFFSET_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Spawns a per-bot task (`what`: "dispatcher", "sync") and, should it panic, logs it and runs `recover`, which
/// makes the task's bot startable again: left as it was, the bot's entry in its table kept any wake-up from
/// starting a new one, and its orders (or its reads) stopped with no word.
pub fn spawn_recovering<F, R>(strategy: &str, bot: &str, what: &'static str, task: F, recover: R)
where
    F: std::future::Future<Output = ()> + Send + 'static,
    R: std::future::Future<Output = ()> + Send + 'static,
{
    let task = tokio::spawn(task);
    let (strategy, bot) = (strategy.to_owned(), bot.to_owned());
    tokio::spawn(async move {
        if let Err(e) = task.await {
            if e.is_panic() {
                tracing::error!(strategy = %strategy, bot = %bot, "the bot's {what} failed; it is started again");
                recover.await;
            }
        }
    });
}

/// The bots of `new` that `old` had at another broker, or at another account of a broker whose requests name
/// the account (where the account is the credentials', an `account_id` edit moves nothing, and dropping the
/// state would lose what only it records, such as option positions' sides).
fn moved_bots(old: &Strategy, new: &Strategy) -> Vec<String> {
    new.bots
        .iter()
        .filter(|b| {
            old.bots.iter().any(|o| {
                o.id == b.id
                    && (o.broker != b.broker || (o.account_id != b.account_id && b.broker.broker().names_account()))
            })
        })
        .map(|b| b.id.to_string())
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use strategy_webhook::broker::BrokerId;

    /// A pause in [`App::refresh_bots`] between its read of the strategy and its upsert (microseconds), so that a
    /// test can land an unload there.
    pub(crate) static REFRESH_PAUSE_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    /// Makes the database at `dir` refuse every rotation's commit.
    fn refuse_rotations(dir: &std::path::Path) {
        let c = rusqlite::Connection::open(dir.join("t.db")).unwrap();
        c.execute_batch(
            "CREATE TRIGGER no_rotation BEFORE INSERT ON token_overrides BEGIN SELECT RAISE(ABORT, 'no'); END;",
        )
        .unwrap();
    }

    /// The file's token edited while a rotation that then fails commits: the edited token goes live after the
    /// failure, as it would have without the rotation. Kept out by the pin, the old token stayed live while the file
    /// named another, and the file was not read again until it changed.
    #[tokio::test]
    async fn a_token_edited_in_during_a_failed_rotation_goes_live_after_it() {
        for _ in 0..100 {
            let (dir, store, app) = temp_app("rotate-fail-reload");
            refuse_rotations(&dir);
            let demo = own_token_demo();
            let id = app.apply_snapshot(demo.as_bytes()).unwrap();
            let (before, edited) = ("f".repeat(64), "b".repeat(64));
            let rotation = app.rotate(&id);
            tokio::pin!(rotation);
            if tokio::time::timeout(Duration::ZERO, rotation.as_mut()).await.is_ok() {
                store.close().await.unwrap();
                std::fs::remove_dir_all(dir).unwrap();
                continue;
            }
            assert_eq!(app.apply_snapshot(demo.replace(&before, &edited).as_bytes()).unwrap(), id);
            let failed = rotation.await;
            assert!(matches!(failed, Err(RotateError::Store(_))), "{failed:?}");
            let routes = |t: &str| app.engine.route(t.as_bytes()).ok().map(|s| s.id.to_string());
            let (new, old, pin) = (routes(&edited), routes(&before), app.rotated_token(&id));
            store.close().await.unwrap();
            std::fs::remove_dir_all(dir).unwrap();
            assert_eq!(pin, None);
            assert_eq!((new.as_deref(), old.as_deref()), (Some(id.as_str()), None));
            return;
        }
        panic!("the rotation's commit always ended before its first poll");
    }

    /// The file's token edited to the published demo token while a rotation that then fails commits, its bot at a
    /// broker: refused as without the rotation, and never put live by the failure (anyone who read the README could
    /// have traded the account).
    #[tokio::test]
    async fn a_failed_rotation_never_puts_the_published_demo_token_live() {
        for _ in 0..100 {
            let (dir, store, app) = temp_app("rotate-fail-published");
            refuse_rotations(&dir);
            let demo = own_token_demo();
            let s = Strategy::from_json(demo.as_bytes()).unwrap();
            let bot = s.bots[0].id.to_string();
            let file = format!(r#"{{"{bot}": {{"delivery": "http", "base_url": "http://127.0.0.1:9"}}}}"#);
            let app = app.with_bots(crate::bots::Bots::from_json(file.as_bytes(), &dir).unwrap());
            let id = app.apply_snapshot(demo.as_bytes()).unwrap();
            let published = demo.replace(&"f".repeat(64), super::PUBLISHED_DEMO_TOKEN);
            assert!(matches!(app.apply_snapshot(published.as_bytes()), Err(SnapshotRefused::PublishedToken)));
            let rotation = app.rotate(&id);
            tokio::pin!(rotation);
            if tokio::time::timeout(Duration::ZERO, rotation.as_mut()).await.is_ok() {
                store.close().await.unwrap();
                std::fs::remove_dir_all(dir).unwrap();
                continue;
            }
            let during = app.apply_snapshot(published.as_bytes());
            let failed = rotation.await;
            let live = app.engine.route(super::PUBLISHED_DEMO_TOKEN.as_bytes()).ok().map(|s| s.id.to_string());
            let still = app.engine.route("f".repeat(64).as_bytes()).ok().map(|s| s.id.to_string());
            store.close().await.unwrap();
            std::fs::remove_dir_all(dir).unwrap();
            assert!(matches!(during, Err(SnapshotRefused::PublishedToken)), "{during:?}");
            assert!(matches!(failed, Err(RotateError::Store(_))), "{failed:?}");
            assert_eq!((live, still.as_deref()), (None, Some(id.as_str())));
            return;
        }
        panic!("the rotation's commit always ended before its first poll");
    }

    /// The file's token edited while a rotation commits: the reload keeps the live token until the commit ends (as
    /// it keeps a rotated one), and that token is the one retired. Unpinned, the file's new token went live during
    /// the commit and outlived the rotation unretired: its senders, trading the strategy until then, were cut off
    /// only until a copy of the file naming it loaded.
    #[tokio::test]
    async fn a_token_edited_in_during_a_rotations_commit_never_goes_live() {
        for _ in 0..100 {
            let (dir, store, app) = temp_app("rotate-reload");
            let demo = own_token_demo();
            let id = app.apply_snapshot(demo.as_bytes()).unwrap();
            let (before, edited) = ("f".repeat(64), "b".repeat(64));
            let rotation = app.rotate(&id);
            tokio::pin!(rotation);
            // Polled once: the rotation has read the live token and waits for its commit (tried again if the
            // commit was quicker).
            if tokio::time::timeout(Duration::ZERO, rotation.as_mut()).await.is_ok() {
                store.close().await.unwrap();
                std::fs::remove_dir_all(dir).unwrap();
                continue;
            }
            // The reload applies the edited file meanwhile: the live token stays.
            assert_eq!(app.apply_snapshot(demo.replace(&before, &edited).as_bytes()).unwrap(), id);
            assert!(app.engine.route(edited.as_bytes()).is_err(), "the edited token went live mid-rotation");
            assert!(app.engine.route(before.as_bytes()).is_ok());
            let rotated = rotation.await.unwrap();
            let retired: Vec<String> = store.reader().retired_tokens().unwrap().into_keys().collect();
            let routes = |t: &str| app.engine.route(t.as_bytes()).ok().map(|s| s.id.to_string());
            let (now, old, new) = (routes(rotated.as_str()), routes(&before), routes(&edited));
            store.close().await.unwrap();
            std::fs::remove_dir_all(dir).unwrap();
            assert_eq!((now.as_deref(), old, new), (Some(id.as_str()), None, None));
            assert_eq!(retired, [before], "the token live until the rotation is the one retired");
            return;
        }
        panic!("the rotation's commit always ended before its first poll");
    }

    /// The demo strategy with a token of its own: with a bot delivered over http, the demo's published token is
    /// refused.
    pub(crate) fn own_token_demo() -> String {
        include_str!("../../strategies/demo.json").replace(super::PUBLISHED_DEMO_TOKEN, &"f".repeat(64))
    }

    /// An App on an embedded store in a directory of its own (removed by the test).
    pub(crate) fn temp_app(name: &str) -> (std::path::PathBuf, crate::store::Store, App) {
        use crate::store::{RowCaps, Store, Sync};
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("swh-app-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        let app = App::new(
            Engine::new(),
            store.writer(),
            store.reader(),
            (HashMap::new(), HashMap::new()),
            "https://x".into(),
            "t".into(),
        );
        (dir, store, app)
    }

    /// A batch's read of the stored tokens, sent before a rotation committed, came back with the old token
    /// after the rotation had been applied here: adopting it put the old token back (the new one answering 404
    /// here until a restart, the poller having applied the new version already).
    #[tokio::test]
    async fn a_token_read_before_a_rotation_does_not_undo_it() {
        let (dir, store, app) = temp_app("tokens");
        let demo = include_bytes!("../../strategies/demo.json");
        let id = app.apply_snapshot(demo).unwrap();
        let token = |c: char| TokenHash::parse(c.to_string().repeat(64).as_bytes()).unwrap();
        let routes = |c: char| app.engine.route(c.to_string().repeat(64).as_bytes()).is_ok();

        // The stored token was '1' when the batch's statement went out; '2' was rotated in meanwhile.
        app.adopt_token(&id, token('1'));
        let sent = std::time::Instant::now();
        app.adopt_token(&id, token('2'));
        app.adopt_token_read(&id, token('1'), Some(sent));
        assert!(routes('2') && !routes('1'), "the rotation stands");

        // A read sent after the last change is taken: it is the database's current token.
        let sent = std::time::Instant::now();
        app.adopt_token_read(&id, token('3'), Some(sent));
        assert!(routes('3') && !routes('2'));

        // The same after this server's own rotation.
        let sent = std::time::Instant::now();
        let rotated = app.rotate(&id).await.unwrap();
        app.adopt_token_read(&id, token('3'), Some(sent));
        assert!(app.engine.route(rotated.as_str().as_bytes()).is_ok() && !routes('3'));
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A bot's account edited while the server runs: the state read from the old account was overlaid on the
    /// new one until the next sync, and a CLOSE sent the old account's quantity to the new account. The state
    /// is dropped when the account changes (an http bot's; a paper bot's account is a name).
    #[tokio::test]
    async fn a_state_stamped_before_targets_is_read_anew_where_the_keys_pick_the_account() {
        let (dir, store, app) = temp_app("pretarget");
        let demo = &own_token_demo();
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        let keyed = s.bots.iter().find(|b| !b.broker.broker().names_account()).unwrap();
        let named = s.bots.iter().find(|b| b.broker.broker().names_account()).unwrap();
        let id = s.id.to_string();
        let live = serde_json::json!({
            &*keyed.id: { "delivery": "http", "base_url": "https://live.broker.example" },
            &*named.id: { "delivery": "http", "base_url": "https://broker.example" },
        });
        let app = app.with_bots(crate::bots::Bots::from_json(live.to_string().as_bytes(), &dir).unwrap());
        // As a version before targets stored them: a source with broker and account, no target.
        for b in [keyed, named] {
            let st = stored_state(Some((b.broker.as_str(), &b.account_id)));
            assert!(st.source.as_ref().unwrap().target.is_none());
            app.set_bot_state(&id, &b.id, st);
        }
        app.apply_snapshot(demo.as_bytes()).unwrap();
        assert_eq!(app.bot_state(&id, &keyed.id), BotState::default(), "where the keys pick the account: read anew");
        assert_ne!(app.bot_state(&id, &named.id), BotState::default(), "where the paths name it, the account tells");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// An alert decided processed whose commit failed was answered 500 with nothing stored, and the strategy's Logs
    /// had no row for it: its rows went with the rolled-back commit. An ERROR row says it was not stored.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_alert_whose_commit_failed_leaves_an_error_row() {
        let (dir, store, app) = temp_app("notstored");
        let app = Arc::new(app);
        let id = app.apply_snapshot(include_bytes!("../../strategies/demo.json")).unwrap();
        let token = app.engine.strategy(&id).unwrap().token_hash.as_str().to_owned();
        let now = now_ms();
        let body = br#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"not-stored-1"}}"#;
        let outcome = app.engine.deliver(token.as_bytes(), body, Some("application/json"), now);
        assert_eq!(outcome.decision, strategy_webhook::Decision::Processed, "{}", outcome.to_json());
        let other = rusqlite::Connection::open(dir.join("t.db")).unwrap();
        other.execute_batch("ALTER TABLE outbox RENAME TO outbox_away").unwrap();
        let queued = app.queue_hand_off(outcome, now, now);
        assert!(app.hand_off_queued(queued).await.is_err(), "the commit fails while the outbox is away");
        other.execute_batch("ALTER TABLE outbox_away RENAME TO outbox").unwrap();
        let q = crate::store::LogQuery { limit: 100, ..Default::default() };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let rows = app.reader.logs(&id, &q).unwrap();
            if let Some(r) = rows.iter().find(|r| r.message.contains("could not be stored")) {
                assert_eq!((r.level.as_str(), r.decision.as_str(), r.http_status), ("ERROR", "error", 500), "{r:?}");
                assert!(r.alerts.to_string().contains("AAPL"), "the row names the alert: {r:?}");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no row says the alert was not stored: {rows:?}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn the_published_demo_token_is_refused_for_a_strategy_with_a_bot_at_a_broker() {
        let (dir, store, app) = temp_app("published");
        let demo = include_str!("../../strategies/demo.json");
        let v: serde_json::Value = serde_json::from_str(demo).unwrap();
        assert_eq!(v["token_hash"], super::PUBLISHED_DEMO_TOKEN, "the constant is the demo's token");
        // On paper, the demo loads with its token.
        assert!(app.apply_snapshot(demo.as_bytes()).is_ok());
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        let bot = s.bots[0].id.to_string();
        let file = format!(r#"{{"{bot}": {{"delivery": "http", "base_url": "http://127.0.0.1:9"}}}}"#);
        let app = app.with_bots(crate::bots::Bots::from_json(file.as_bytes(), &dir).unwrap());
        let refused = app.apply_snapshot(demo.as_bytes());
        assert!(matches!(refused, Err(SnapshotRefused::PublishedToken)), "{refused:?}");
        assert!(app.apply_snapshot(own_token_demo().as_bytes()).is_ok(), "with a token of its own");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A strategy of `bots` (id, broker, account id) allowing `allowed`, with a token made of `t`.
    fn on_accounts(id: &str, t: char, allowed: &[&str], bots: &[(&str, BrokerId, &str)]) -> String {
        let mut v: serde_json::Value = serde_json::from_str(&own_token_demo()).unwrap();
        v["id"] = serde_json::json!(id);
        v["token_hash"] = serde_json::json!(t.to_string().repeat(64));
        v["allowed_instruments"] = serde_json::json!(allowed);
        v["bots"] = bots
            .iter()
            .map(|(bot, broker, account)| {
                serde_json::json!({ "id": bot, "broker": broker.as_str(), "account_id": account,
                                    "sizing": { "fixed_quantity": "1" } })
            })
            .collect();
        v.to_string()
    }

    /// Bots file entries at one base URL, each with the key named beside it (`None`: a paper entry).
    fn keyed_bots(dir: &std::path::Path, entries: &[(&str, Option<&str>)]) -> Bots {
        let file: serde_json::Map<String, serde_json::Value> = entries
            .iter()
            .map(|(bot, key)| {
                let entry = match key {
                    Some(k) => serde_json::json!({ "delivery": "http", "base_url": "https://broker.example/v2",
                                                   "headers": { "X-Key": { "value": k } } }),
                    None => serde_json::json!({ "delivery": "paper" }),
                };
                ((*bot).to_owned(), entry)
            })
            .collect();
        Bots::from_json(serde_json::Value::Object(file).to_string().as_bytes(), dir).unwrap()
    }

    fn keyed_broker() -> BrokerId {
        BrokerId::ALL.into_iter().find(|b| !b.broker().names_account()).unwrap()
    }

    fn named_broker() -> BrokerId {
        BrokerId::ALL.into_iter().find(|b| b.broker().names_account()).unwrap()
    }

    /// Where the keys pick the account, two bots of a strategy given the same URL and keys trade one account
    /// whatever their `account_id` labels say: each bot's sync read the whole account as its own, and one CLOSE
    /// sold the position twice. Other keys are another account; paper bots have books of their own.
    #[tokio::test]
    async fn two_bots_of_a_strategy_on_one_key_are_refused_where_the_keys_pick_the_account() {
        let (dir, store, app) = temp_app("twobots");
        let b = keyed_broker();
        let snapshot = on_accounts("s", 'a', &["AAPL"], &[("b1", b, "ACC1"), ("b2", b, "ACC2")]);
        let app = app.with_bots(keyed_bots(&dir, &[("b1", Some("k1")), ("b2", Some("k1"))]));
        let refused = app.apply_snapshot(snapshot.as_bytes());
        assert!(matches!(&refused, Err(SnapshotRefused::TwoBotsOneAccount(t)) if t.index == 1), "{refused:?}");
        let said = refused.unwrap_err().to_string();
        assert!(said.starts_with(&format!("`bots[1]` \"b2\" trades the same {} account as bot \"b1\"", b.as_str())));
        assert!(app.engine.strategy("s").is_none());
        let app = app.with_bots(keyed_bots(&dir, &[("b1", Some("k1")), ("b2", Some("k2"))]));
        assert!(app.apply_snapshot(snapshot.as_bytes()).is_ok(), "other keys, another account");
        let app = app.with_bots(keyed_bots(&dir, &[("b1", None), ("b2", None)]));
        assert!(app.apply_snapshot(snapshot.as_bytes()).is_ok(), "on paper");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The bots file is keyed by bot id: two strategies naming one bot trade one account. A strategy that bought
    /// nothing was handed the other's position by its sync, and its CLOSE sold it. Refused where their instruments
    /// may overlap, in any spelling; allowed where they cannot (each sync keeps its strategy's instruments), and
    /// on paper. An edit of the loaded strategy itself is no sharing.
    #[tokio::test]
    async fn a_strategy_sharing_another_ones_account_is_refused_where_their_instruments_can_overlap() {
        let (dir, store, app) = temp_app("sharedaccount");
        let (keyed, named) = (keyed_broker(), named_broker());
        let app = app
            .with_bots(keyed_bots(&dir, &[("b", Some("k1")), ("c", Some("k1")), ("d", Some("k2")), ("n", Some("k1"))]));
        let live = on_accounts("live", 'a', &["AAPL", "MSFT"], &[("b", keyed, "ACC1"), ("n", named, "H1")]);
        app.apply_snapshot(live.as_bytes()).unwrap();
        app.apply_snapshot(live.as_bytes()).unwrap();
        let other = |allowed: &[&str], bot: &str, broker: BrokerId, account: &str| {
            app.apply_snapshot(on_accounts("other", 'c', allowed, &[(bot, broker, account)]).as_bytes())
        };
        let refused = other(&["nasdaq:aapl"], "b", keyed, "ACC9");
        assert!(matches!(&refused, Err(SnapshotRefused::SharedAccount(a)) if a.instrument == "AAPL"));
        let said = refused.unwrap_err().to_string();
        let names = format!(
            "bot \"b\" of strategy \"other\" trades the same {} account as bot \"b\" of strategy \"live\"",
            keyed.as_str()
        );
        assert!(said.starts_with(&names), "{said}");
        assert!(said.contains("both may trade AAPL"), "{said}");
        assert!(app.engine.strategy("other").is_none());
        // Another bot id with the same URL and keys is the same account.
        assert!(matches!(other(&["*"], "c", keyed, "ACC1"), Err(SnapshotRefused::SharedAccount(_))));
        assert!(other(&["TSLA"], "c", keyed, "ACC1").is_ok(), "instruments that cannot overlap");
        assert!(other(&["MSFT"], "d", keyed, "ACC1").is_ok(), "other keys");
        // Where the paths name the account: the same account id is the same account, whatever the keys.
        let refused = other(&["MSFT"], "d", named, "H1");
        assert!(matches!(&refused, Err(SnapshotRefused::SharedAccount(_))), "{refused:?}");
        assert!(refused.unwrap_err().to_string().contains(&format!("{} account \"H1\"", named.as_str())));
        assert!(other(&["MSFT"], "d", named, "H2").is_ok(), "another account id");
        // Bots not in the bots file are on paper: each strategy's has a book of its own.
        assert!(other(&["AAPL"], "p", keyed, "ACC1").is_ok());
        let paper = on_accounts("paper2", 'e', &["AAPL"], &[("p", keyed, "ACC1")]);
        assert!(app.apply_snapshot(paper.as_bytes()).is_ok(), "a paper bot of two strategies");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_bot_moved_to_another_account_drops_the_old_accounts_state() {
        let (dir, store, app) = temp_app("moved");
        let demo = &own_token_demo();
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        // The demo's two bots: one at a broker whose requests name the account, one whose account is the keys'.
        let named = s.bots.iter().find(|b| b.broker.broker().names_account()).unwrap();
        let keyed = s.bots.iter().find(|b| !b.broker.broker().names_account()).unwrap();
        let (named, named_account) = (named.id.to_string(), named.account_id.to_string());
        let (keyed, keyed_account) = (keyed.id.to_string(), keyed.account_id.to_string());
        let http = |bot: &str| {
            let file = serde_json::json!({ bot: { "delivery": "http", "base_url": "https://127.0.0.1:9" } });
            crate::bots::Bots::from_json(file.to_string().as_bytes(), &dir).unwrap()
        };
        let app = app.with_bots(http(&named));
        let id = app.apply_snapshot(demo.as_bytes()).unwrap();
        let held = crate::paper::BotState { next_id: 5, ..Default::default() };
        for bot in [&named, &keyed] {
            app.set_bot_state(&id, bot, held.clone());
        }
        // The same file again: nothing moved, nothing dropped.
        app.apply_snapshot(demo.as_bytes()).unwrap();
        assert_eq!(app.bot_state(&id, &named).next_id, 5);
        // Both bots' accounts edited.
        let edited = demo.replace(&named_account, "OTHERHASH").replace(&keyed_account, "PA1111111");
        app.apply_snapshot(edited.as_bytes()).unwrap();
        assert_eq!(app.bot_state(&id, &named), crate::paper::BotState::default(), "the old account's state");
        assert_eq!(app.bot_state(&id, &keyed).next_id, 5, "a paper bot keeps its simulated book");
        // At a broker whose account is the credentials', an account_id edit moves nothing.
        let app = app.with_bots(http(&keyed));
        app.apply_snapshot(edited.replace("PA1111111", "PA2222222").as_bytes()).unwrap();
        assert_eq!(app.bot_state(&id, &keyed).next_id, 5, "the credentials' account did not change");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A state holding 10 AAPL long, read from `source` (`(broker, account)`), as the database stores it.
    fn stored_state(source: Option<(&str, &str)>) -> BotState {
        let mut v = serde_json::json!({
            "positions": [{ "instrument": "AAPL", "direction": "long", "quantity": "10" }],
            "working_orders": [{ "id": "W1", "instrument": "MSFT", "direction": "long", "intent": "entry",
                                 "order_type": "limit", "price": "400", "quantity": "5", "state": "open" }],
        });
        if let Some((broker, account)) = source {
            v["source"] = serde_json::json!({ "broker": broker, "account": account });
        }
        serde_json::from_str(&v.to_string()).unwrap()
    }

    /// Whether the engine decides for the bot against the positions and working orders of [`stored_state`].
    fn decides_with_the_state(app: &App, id: &str, bot: &str) -> bool {
        let s = app.engine.strategy(id).unwrap();
        let b = s.bots.iter().find(|b| *b.id == *bot).unwrap();
        b.positions.iter().any(|p| p.instrument.as_str() == "AAPL") && b.working_orders.iter().any(|o| o.id == "W1")
    }

    /// A stored state of a bot's old account, loaded at start after its `account_id` was edited with the server
    /// stopped, was put into the new account's snapshot, and so was one that another server sharing the database
    /// stored for the old account (adopted with the bot's lease): a CLOSE sent the old account's quantity to the
    /// new account, and a CANCEL the old account's order id. Neither is used, nor a state of another broker; the
    /// bot's own account's is.
    #[tokio::test]
    async fn a_stored_state_of_another_account_or_broker_is_not_used() {
        let (dir, store, app) = temp_app("stamped");
        let demo = &own_token_demo();
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        let named = s.bots.iter().find(|b| b.broker.broker().names_account()).unwrap();
        let (id, bot, broker, account) =
            (s.id.to_string(), named.id.to_string(), named.broker.as_str(), named.account_id.clone());
        let other = strategy_webhook::broker::BrokerId::ALL.into_iter().find(|b| *b != named.broker).unwrap();
        let file = serde_json::json!({ &bot: { "delivery": "http", "base_url": "https://127.0.0.1:9" } });
        let app = app.with_bots(crate::bots::Bots::from_json(file.to_string().as_bytes(), &dir).unwrap());
        // Start-up: the stored states are set before the strategies load; the file names another account now.
        app.set_bot_state(&id, &bot, stored_state(Some((broker, "OLDHASH"))));
        assert_eq!(app.apply_snapshot(demo.as_bytes()).unwrap(), id);
        assert!(!decides_with_the_state(&app, &id, &bot), "the old account's stored state was loaded");
        assert_eq!(app.bot_state(&id, &bot), BotState::default());
        // Shared database: a state another server stored for the old account, or for another broker.
        for (n, source) in [(broker, "OLDHASH"), (other.as_str(), account.as_str())].into_iter().enumerate() {
            let row = serde_json::to_string(&stored_state(Some(source))).unwrap();
            app.adopt_bot_states(&id, vec![(bot.clone(), row, n as i64 + 1)], Some(&bot));
            assert!(!decides_with_the_state(&app, &id, &bot), "adopted from {source:?}");
            assert_eq!(app.bot_state(&id, &bot), BotState::default(), "adopted from {source:?}");
        }
        // A paper book of this very broker and account, stored before the bot was switched to a real broker: its
        // positions are the simulation's, and a CLOSE would have sold them at the broker before its first read.
        let mut paper_book = stored_state(Some((broker, &account)));
        paper_book.source.as_mut().unwrap().paper = true;
        app.adopt_bot_states(&id, vec![(bot.clone(), serde_json::to_string(&paper_book).unwrap(), 3)], Some(&bot));
        assert!(!decides_with_the_state(&app, &id, &bot), "the paper book was used for the real account");
        app.set_bot_state(&id, &bot, paper_book);
        assert_eq!(app.bot_state(&id, &bot), BotState::default(), "the paper book was used for the real account");
        // The bot's own account's state is used.
        let row = serde_json::to_string(&stored_state(Some((broker, &account)))).unwrap();
        app.adopt_bot_states(&id, vec![(bot.clone(), row, 4)], Some(&bot));
        assert!(decides_with_the_state(&app, &id, &bot));
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// What the source leaves as it was: a state stored before states recorded one is loaded and used, and where
    /// the account is the credentials' (requests do not name it) an `account_id` edit keeps the state, even one
    /// read under the old id.
    #[tokio::test]
    async fn an_unstamped_state_is_used_and_a_credentials_account_edit_keeps_the_state() {
        let (dir, store, app) = temp_app("unstamped");
        let demo = &own_token_demo();
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        let named = s.bots.iter().find(|b| b.broker.broker().names_account()).unwrap();
        let keyed = s.bots.iter().find(|b| !b.broker.broker().names_account()).unwrap();
        let id = s.id.to_string();
        let file = serde_json::json!({
            &*named.id: { "delivery": "http", "base_url": "https://127.0.0.1:9" },
            &*keyed.id: { "delivery": "http", "base_url": "https://127.0.0.1:9" },
        });
        let app = app.with_bots(crate::bots::Bots::from_json(file.to_string().as_bytes(), &dir).unwrap());
        // Start-up, as the database holds them: one with no source, one read under another id of the keys' account.
        app.set_bot_state(&id, &named.id, stored_state(None));
        // Read at the bot's target (states stamped before targets were are read anew where the keys pick the
        // account: see `a_state_stamped_before_targets_is_read_anew_where_the_keys_pick_the_account`).
        let at_target = |mut st: BotState| {
            st.source.as_mut().unwrap().target = Some(app.bots.target(&keyed.id).to_owned());
            st
        };
        let keyed_source = (keyed.broker.as_str(), "PA1111111");
        app.set_bot_state(&id, &keyed.id, at_target(stored_state(Some(keyed_source))));
        app.apply_snapshot(demo.as_bytes()).unwrap();
        assert!(decides_with_the_state(&app, &id, &named.id), "the state with no source is used");
        assert!(decides_with_the_state(&app, &id, &keyed.id), "the keys' account is the same");
        // The keyed bot's account_id edited: the state stays, and a read made under the old id is taken.
        let edited = demo.replace(&keyed.account_id, "PA2222222");
        app.apply_snapshot(edited.as_bytes()).unwrap();
        assert!(decides_with_the_state(&app, &id, &keyed.id), "an edit of the keys' account's id dropped it");
        let read = at_target(stored_state(Some((keyed.broker.as_str(), &keyed.account_id))));
        assert!(app.replace_bot_state(&id, &keyed.id, &at_target(stored_state(Some(keyed_source))), read.clone()));
        assert_eq!(app.bot_state(&id, &keyed.id), read);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// At a broker whose paths name no account, the keys pick it: an operator who swapped a bot's keys for another
    /// account's with the server stopped, keeping the base URL, had the old account's stored state (its 10 AAPL
    /// and order W1) decided against at the new one, and the rows stored with the old keys compared equal to the
    /// new target and went to the new account. The target carries the keys' fingerprint now.
    #[tokio::test]
    async fn a_keys_swap_to_another_account_keeps_the_old_accounts_state_and_rows() {
        let (dir, store, app) = temp_app("auth4-keys");
        let demo = &own_token_demo();
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        let keyed = s.bots.iter().find(|b| !b.broker.broker().names_account()).unwrap();
        let id = s.id.to_string();
        let bots = |key: &str| {
            let file = serde_json::json!({ &*keyed.id: { "delivery": "http", "base_url": "https://127.0.0.1:9",
                "headers": { "APCA-API-KEY-ID": { "value": key }, "APCA-API-SECRET-KEY": { "value": "secret" } } } });
            crate::bots::Bots::from_json(file.to_string().as_bytes(), &dir).unwrap()
        };
        let (with_a, with_b) = (bots("KEY-OF-ACCOUNT-A"), bots("KEY-OF-ACCOUNT-B"));
        let mut read_at_a = stored_state(Some((keyed.broker.as_str(), &keyed.account_id)));
        read_at_a.source.as_mut().unwrap().target = Some(with_a.target(&keyed.id).to_owned());
        let app = app.with_bots(with_b);
        app.set_bot_state(&id, &keyed.id, read_at_a);
        app.apply_snapshot(demo.as_bytes()).unwrap();
        let state_used = decides_with_the_state(&app, &id, &keyed.id);
        let rows_go = with_a.target(&keyed.id) == app.bots.target(&keyed.id);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert!(!state_used, "account A's 10 AAPL and order W1 are decided against at account B");
        assert!(!rows_go, "a row stored with account A's keys is not `misdirected` and goes to account B");
    }

    /// After an upgrade, a state a version before fingerprints stamped with the bot's bare URL is still the keys'
    /// account's (it was checked against that URL before), and one read under the keys now is used.
    #[tokio::test]
    async fn a_state_stamped_with_the_url_alone_or_the_same_keys_is_used() {
        let (dir, store, app) = temp_app("keys-legacy");
        let demo = &own_token_demo();
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        let keyed = s.bots.iter().find(|b| !b.broker.broker().names_account()).unwrap();
        let id = s.id.to_string();
        let file = serde_json::json!({ &*keyed.id: { "delivery": "http", "base_url": "https://127.0.0.1:9",
            "headers": { "APCA-API-KEY-ID": { "value": "KEY-OF-ACCOUNT-A" } } } });
        let app = app.with_bots(crate::bots::Bots::from_json(file.to_string().as_bytes(), &dir).unwrap());
        let here = app.bots.target(&keyed.id).to_owned();
        assert!(here.starts_with("https://127.0.0.1:9 (keys "), "{here}");
        let stamped = |target: &str| {
            let mut st = stored_state(Some((keyed.broker.as_str(), &keyed.account_id)));
            st.source.as_mut().unwrap().target = Some(target.to_owned());
            st
        };
        app.set_bot_state(&id, &keyed.id, stamped("https://127.0.0.1:9"));
        app.apply_snapshot(demo.as_bytes()).unwrap();
        assert!(decides_with_the_state(&app, &id, &keyed.id), "a state stamped with the bare URL was dropped");
        app.set_bot_state(&id, &keyed.id, stamped(&here));
        assert!(decides_with_the_state(&app, &id, &keyed.id), "a state read under the same keys was dropped");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A strategy deleted while its bots' states were being refreshed (fills, deliveries, a sync) was put back by
    /// the refresh, and traded on. Unloading is ordered with the refresh now: once unloaded, it stays unloaded.
    #[tokio::test]
    async fn a_strategy_unloaded_during_a_refresh_stays_unloaded() {
        let (dir, store, app) = temp_app("unload");
        let app = std::sync::Arc::new(app);
        let demo = include_bytes!("../../strategies/demo.json");
        REFRESH_PAUSE_US.store(2_000, std::sync::atomic::Ordering::Relaxed);
        for _ in 0..10 {
            let id = app.apply_snapshot(demo).unwrap();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let refresher = {
                let (app, id, stop) = (std::sync::Arc::clone(&app), id.clone(), std::sync::Arc::clone(&stop));
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        app.refresh_bots(&id);
                        // Refreshes come one after another in the server, not back to back under the lock.
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                })
            };
            // Into the refresh's pause, between its read and its upsert.
            std::thread::sleep(std::time::Duration::from_micros(2_500));
            assert!(app.unload(&id));
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            refresher.join().unwrap();
            assert!(app.engine.strategy(&id).is_none(), "the refresh put the deleted strategy back");
        }
        REFRESH_PAUSE_US.store(0, std::sync::atomic::Ordering::Relaxed);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The token poller's read, sent before this server's own rotation, came back with the token rotated away:
    /// applied as any poll was, it put that token back for a poll's time (the token just handed to the admin
    /// answering 404 here). Skipped, and not marked applied, so a later poll looks at the row again.
    #[tokio::test]
    async fn a_poll_sent_before_a_rotation_does_not_undo_it() {
        let (dir, store, app) = temp_app("poll");
        let demo = include_bytes!("../../strategies/demo.json");
        let id = app.apply_snapshot(demo).unwrap();
        let old = app.engine.strategy(&id).unwrap().token_hash.clone();
        let sent = std::time::Instant::now();
        let rotated = app.rotate(&id).await.unwrap();
        let mut applied = HashMap::new();
        app.adopt_token_rows(vec![(id.clone(), old.as_str().to_owned(), 7)], sent, &mut applied);
        assert!(app.engine.route(rotated.as_str().as_bytes()).is_ok(), "the rotation stands");
        assert!(app.engine.route(old.as_str().as_bytes()).is_err(), "the token rotated away stays away");
        assert!(applied.is_empty(), "a skipped row is looked at again");
        // A poll sent after the rotation is applied (here: the rotated token, already current).
        let later = std::time::Instant::now();
        app.adopt_token_rows(vec![(id.clone(), rotated.as_str().to_owned(), 8)], later, &mut applied);
        assert_eq!(applied.get(&id), Some(&8));
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A hand-off that failed gives its key back, then takes its entry off the map. A retry claimed the key again
    /// in between and put its own entry there: that one must stay, so a later copy answered duplicate waits for
    /// the retry's commit instead of being told it is a duplicate of a commit that may yet fail.
    #[tokio::test]
    async fn a_finished_hand_off_leaves_a_later_one_of_the_same_key_in_place() {
        let (dir, store, app) = temp_app("handoff");
        let key = ("s".to_owned(), [7u8; 32]);
        let (_first_tx, first) = watch::channel(None);
        let (_retry_tx, retry) = watch::channel(None);
        app.in_flight.lock().unwrap().insert(key.clone(), retry.clone());
        app.end_hand_off(&key, &first);
        assert!(app.committing("s", &key.1).is_some(), "the retry's entry stays");
        app.end_hand_off(&key, &retry);
        assert!(app.committing("s", &key.1).is_none(), "its own hand-off takes it off");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }
}
