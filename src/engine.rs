//! The engine: strategies by token, and the order of checks from DESIGN.md, each
//! answered with the spec's status and body.
//!
//! 1. token shape → 400; 2. unknown token → 404; 3. body over 262,144 bytes → 413;
//! 4. rate → 429; 5. not active → 200 rejected:true; 6. dedup → 200 duplicate;
//! 7. parse (too many legs → 422); 8. rules → 200 rejected; 9. orders (cause → 500);
//! 10. 200 processed.

use crate::alert::{self, Action, Alert, Alerts, ParseError};
use crate::broker;
use crate::builder::{self, BuildContext};
use crate::decide::{decide, resolve_words};
use crate::digest;
use crate::model::{BotAction, ClientOrderId, Direction, RequestKind};
use crate::outcome::{ErrorKind, Level, Logs, OrderRequest, Outcome};
use crate::state::{Claim, DedupKey, HexKey, Limits, MemoryStore, Settled, StateStore};
use crate::strategy::{SnapshotError, Status, Strategy, TokenHash};
use compact_str::CompactString;
use sha2::{Digest, Sha256};
use smallvec::SmallVec;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{Arc, RwLock, RwLockReadGuard};

/// Largest body accepted: 256 KiB.
pub const MAX_BODY: usize = 262_144;

/// Why an engine operation on strategies failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The snapshot did not load.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Another strategy already answers on this token.
    #[error("another strategy ({0}) already uses this token")]
    TokenInUse(String),
    /// No strategy has this id.
    #[error("no strategy with id {0:?}")]
    UnknownStrategy(String),
}

#[derive(Default)]
struct Registry {
    by_token: HashMap<TokenHash, Arc<Strategy>, BuildTokenHasher>,
    token_of: HashMap<String, TokenHash>,
}

/// Hashes a token for the registry without a keyed hash (SipHash of 64 bytes is a
/// noticeable part of a delivery). Keying guards a map against keys chosen to collide, and
/// this map's keys are only the registered strategies' tokens, which are random: a
/// lookup with a key a sender chose probes the map but adds nothing to it, so it cannot
/// lengthen a probe sequence. Every byte is folded in, so no two tokens are told apart by
/// less than all of them.
#[derive(Default, Clone, Copy)]
struct BuildTokenHasher;

impl std::hash::BuildHasher for BuildTokenHasher {
    type Hasher = TokenHasher;
    fn build_hasher(&self) -> TokenHasher {
        TokenHasher(0)
    }
}

/// FxHash's word step, with a final mix so that both the high bits (the map's tags) and
/// the low ones (its buckets) depend on every word.
struct TokenHasher(u64);

impl TokenHasher {
    const K: u64 = 0x517c_c1b7_2722_0a95;

    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::K);
    }
}

impl std::hash::Hasher for TokenHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(w.try_into().map_or(0, u64::from_le_bytes));
        }
        for b in words.remainder() {
            self.add(u64::from(*b));
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        let h = self.0 ^ (self.0 >> 32);
        h.wrapping_mul(Self::K) ^ (h >> 29)
    }
}

/// Holds strategies by token and the state that outlives one call. `Send + Sync`:
/// share it between threads; deliveries for different strategies rarely wait on one
/// another, and then only for one window update of the [`MemoryStore`]'s (the registry
/// lock is only read on the hot path).
pub struct Engine<S: StateStore = MemoryStore> {
    registry: RwLock<Registry>,
    store: S,
}

impl Default for Engine<MemoryStore> {
    fn default() -> Self {
        Engine::new()
    }
}

impl Engine<MemoryStore> {
    /// An engine with the spec's limits (60 a minute, 300 s dedup window).
    pub fn new() -> Self {
        Engine::with_store(MemoryStore::new(Limits::default()))
    }

    /// An engine with other limits (for example a higher rate for a load test).
    pub fn with_limits(limits: Limits) -> Self {
        Engine::with_store(MemoryStore::new(limits))
    }
}

impl<S: StateStore> Engine<S> {
    /// An engine keeping its windows in `store`.
    pub fn with_store(store: S) -> Self {
        Engine { registry: RwLock::default(), store }
    }

    /// The state store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Adds a strategy, or replaces the one with the same id (keeping its dedup and rate
    /// state). A new token on a known id is a rotation: the old token stops at once.
    ///
    /// The snapshot's instruments are read into their keys here ([`Strategy::index`]), so a
    /// host may change positions or working orders on a loaded strategy and upsert it.
    ///
    /// An upsert of a snapshot read before a [`Engine::rotate`] carries the old token and puts it back: a host
    /// that both rotates and upserts a strategy read from the engine orders the two (the reference server
    /// does so with one lock).
    pub fn upsert(&self, mut strategy: Strategy) -> Result<(), EngineError> {
        strategy.index();
        let mut reg = self.registry.write().unwrap_or_else(|e| e.into_inner());
        Self::install(&mut reg, strategy)
    }

    /// Puts `strategy` (indexed) in the registry under its token, in place of its id's previous one.
    fn install(reg: &mut Registry, strategy: Strategy) -> Result<(), EngineError> {
        if let Some(other) = reg.by_token.get(&strategy.token_hash) {
            if other.id != strategy.id {
                return Err(EngineError::TokenInUse(other.id.to_string()));
            }
        }
        if let Some(old) = reg.token_of.insert(strategy.id.to_string(), strategy.token_hash.clone()) {
            reg.by_token.remove(&old);
        }
        reg.by_token.insert(strategy.token_hash.clone(), Arc::new(strategy));
        Ok(())
    }

    /// Reads a snapshot from JSON and [`Engine::upsert`]s it. Returns the strategy id.
    pub fn upsert_json(&self, snapshot: &[u8]) -> Result<String, EngineError> {
        let s = Strategy::from_json(snapshot)?;
        let id = s.id.to_string();
        self.upsert(s)?;
        Ok(id)
    }

    /// Removes a strategy and its state. Returns whether it existed.
    ///
    /// A delivery holds the registry's read lock from finding its strategy through its dedup claim (`process`),
    /// so the unload's write lock waits for every delivery that found the strategy to have made its count and
    /// claim, and the forget after it leaves no window behind; later deliveries no longer find the strategy.
    ///
    /// The forget runs under that write lock (registry, then the store's shard, the order a delivery takes them
    /// in): run after it, an upsert of the same id in between had its first claims forgotten, and the resend of
    /// an alert it had just traded traded again.
    pub fn remove(&self, id: &str) -> bool {
        let mut reg = self.registry.write().unwrap_or_else(|e| e.into_inner());
        let removed = Self::take_out(&mut reg, id);
        if removed {
            self.store.forget(id);
        }
        removed
    }

    /// Removes a strategy but keeps its dedup and rate windows, which age out on their own: loaded again under
    /// the same id (its file renamed, or deleted and written back by a tool), it still answers a retry inside
    /// its window as a duplicate, and its window still counts what it took. Returns whether it existed.
    pub fn unload(&self, id: &str) -> bool {
        let mut reg = self.registry.write().unwrap_or_else(|e| e.into_inner());
        Self::take_out(&mut reg, id)
    }

    /// Takes the strategy with this id out of `reg`. Returns whether it was there.
    fn take_out(reg: &mut Registry, id: &str) -> bool {
        let Some(token) = reg.token_of.remove(id) else { return false };
        reg.by_token.remove(&token);
        true
    }

    /// Gives a strategy a new token: the old one answers 404 from now on, and the
    /// strategy keeps its dedup and rate state.
    ///
    /// Read and replaced under one lock: an [`Engine::upsert`] on another thread (new positions, a pause) is
    /// never undone by a rotation that read the strategy before it.
    pub fn rotate(&self, id: &str, new_token: TokenHash) -> Result<(), EngineError> {
        let mut reg = self.registry.write().unwrap_or_else(|e| e.into_inner());
        let current = reg.token_of.get(id).and_then(|t| reg.by_token.get(t));
        let mut s = current.map(|c| (**c).clone()).ok_or_else(|| EngineError::UnknownStrategy(id.to_string()))?;
        s.token_hash = new_token;
        Self::install(&mut reg, s)
    }

    /// The strategy with this id.
    pub fn strategy(&self, id: &str) -> Option<Arc<Strategy>> {
        let reg = self.registry.read().unwrap_or_else(|e| e.into_inner());
        reg.token_of.get(id).and_then(|t| reg.by_token.get(t)).cloned()
    }

    /// Every strategy, in no particular order.
    pub fn strategies(&self) -> Vec<Arc<Strategy>> {
        self.registry.read().unwrap_or_else(|e| e.into_inner()).by_token.values().cloned().collect()
    }

    /// Gives back the dedup key of an outcome (its `dedup_key`) for a strategy: the host
    /// could not make the outcome durable and answers with an error, so the sender's
    /// retry must trade once rather than be called a duplicate. Returns false for a key
    /// that is not hex.
    pub fn release(&self, strategy_id: &str, dedup_key_hex: &str) -> bool {
        match parse_hex_key(dedup_key_hex) {
            Some(key) => {
                self.store.release(strategy_id, &key);
                true
            }
            None => false,
        }
    }

    /// Handles one POST to `/webhooks/{token}`.
    pub fn deliver(&self, token: &[u8], body: &[u8], content_type: Option<&str>, now_ms: i64) -> Outcome {
        self.handle(token, body, content_type, now_ms, Mode::Record)
    }

    /// The same checks as [`Engine::deliver`] against the current state, recording
    /// nothing: the product's "validate a sample message".
    pub fn dry_run(&self, token: &[u8], body: &[u8], content_type: Option<&str>, now_ms: i64) -> Outcome {
        self.handle(token, body, content_type, now_ms, Mode::Peek)
    }

    /// [`Engine::deliver`] with the rate count and the dedup claim answered by `settled`
    /// instead of the engine's own store: for a host that keeps its windows in a shared
    /// database and makes the count and the claim in the same transaction as the outbox
    /// rows (so a race between servers trades once and a crash never separates "claimed"
    /// from "stored"). Afterwards `settled` says what to keep
    /// ([`Settled::counted`], [`Settled::keeps_claim`]).
    pub fn deliver_settled(
        &self,
        settled: &Settled,
        token: &[u8],
        body: &[u8],
        content_type: Option<&str>,
        now_ms: i64,
    ) -> Outcome {
        self.handle_with(settled, token, body, content_type, now_ms, Mode::Record)
    }

    /// Steps 1 and 2 of the order of checks: the strategy a webhook token names, or the 400 or 404 Outcome a
    /// delivery with this token gets (whatever its body). Records nothing, so a host may answer from it before
    /// reading a body; a delivery then decides again, against the registry as it stands by then. (The answer is
    /// boxed: it is the rare case, and the strategy the common one.)
    pub fn route(&self, token: &[u8]) -> Result<Arc<Strategy>, Box<Outcome>> {
        let token = Self::parse_token(token)?;
        let reg = self.registry.read().unwrap_or_else(|e| e.into_inner());
        Self::find(&reg, &token)
    }

    /// A webhook token's hash, or the 400 Outcome.
    fn parse_token(token: &[u8]) -> Result<TokenHash, Box<Outcome>> {
        TokenHash::parse(token).ok_or_else(|| {
            Box::new(Outcome::failed(
                ErrorKind::InvalidToken,
                "the webhook token is not valid: it must be 64 lowercase hexadecimal characters".into(),
            ))
        })
    }

    /// The strategy with this token in `reg`, or the 404 Outcome.
    fn find(reg: &Registry, token: &TokenHash) -> Result<Arc<Strategy>, Box<Outcome>> {
        reg.by_token.get(token).cloned().ok_or_else(|| {
            Box::new(Outcome::failed(
                ErrorKind::UnknownToken,
                "no strategy has this webhook token (it may have been rotated)".into(),
            ))
        })
    }

    fn handle(&self, token: &[u8], body: &[u8], content_type: Option<&str>, now_ms: i64, mode: Mode) -> Outcome {
        self.handle_with(&self.store, token, body, content_type, now_ms, mode)
    }

    fn handle_with<T: StateStore>(
        &self,
        store: &T,
        token: &[u8],
        body: &[u8],
        content_type: Option<&str>,
        now_ms: i64,
        mode: Mode,
    ) -> Outcome {
        let mut out = Outcome::processed();
        self.handle_into(&mut out, store, token, body, content_type, now_ms, mode);
        out
    }

    /// [`Engine::deliver`] into an Outcome the caller keeps, which this delivery's replaces
    /// (what it held is dropped, not reused). The same answers as [`Engine::deliver`],
    /// without moving a new Outcome out of the call: the C ABI's `swh_engine_deliver_into`
    /// is this, so a C host keeps one handle instead of registering one per delivery.
    pub fn deliver_into(&self, out: &mut Outcome, token: &[u8], body: &[u8], content_type: Option<&str>, now_ms: i64) {
        self.handle_into(out, &self.store, token, body, content_type, now_ms, Mode::Record)
    }

    #[allow(clippy::too_many_arguments)]
    fn handle_into<T: StateStore>(
        &self,
        out: &mut Outcome,
        store: &T,
        token: &[u8],
        body: &[u8],
        content_type: Option<&str>,
        now_ms: i64,
        mode: Mode,
    ) {
        let token = match Self::parse_token(token) {
            Ok(t) => t,
            Err(answer) => {
                *out = *answer;
                return;
            }
        };
        // Held through the count and the claim (see `Engine::remove`): released first, a delivery that found a
        // strategy being removed made its windows again after the removal forgot them. Holding the lock the lookup
        // takes anyway costs a delivery nothing more; a writer waits for the deliveries under way to reach their
        // claim.
        let reg = self.registry.read().unwrap_or_else(|e| e.into_inner());
        let strategy = match Self::find(&reg, &token) {
            Ok(s) => s,
            Err(answer) => {
                *out = *answer;
                return;
            }
        };
        *out = Outcome::processed();
        process(&strategy, body, content_type, now_ms, Some((store, mode, reg)), out);
        out.strategy = Some(Arc::clone(&strategy.id));
    }
}

/// A dry run of one body against a snapshot, with no engine state at all: the checks
/// from 413 on, without rate or dedup.
///
/// A strategy that was deserialized without [`Strategy::from_json`] has its instruments read
/// into keys first (on a copy).
pub fn validate(strategy: &Strategy, body: &[u8], content_type: Option<&str>, now_ms: i64) -> Outcome {
    let indexed;
    let strategy = if strategy.is_indexed() {
        strategy
    } else {
        let mut copy = strategy.clone();
        copy.index();
        indexed = copy;
        &indexed
    };
    let mut outcome = Outcome::processed();
    process::<MemoryStore>(strategy, body, content_type, now_ms, None, &mut outcome);
    outcome.strategy = Some(Arc::clone(&strategy.id));
    outcome
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Record,
    Peek,
}

/// Steps 3 to 10 for one strategy, into `out` (a processed Outcome, replaced by any other
/// answer). The registry guard that found the strategy, with the state, is let go once the dedup key is claimed.
fn process<S: StateStore>(
    strategy: &Strategy,
    body: &[u8],
    content_type: Option<&str>,
    now_ms: i64,
    state: Option<(&S, Mode, RwLockReadGuard<'_, Registry>)>,
    out: &mut Outcome,
) {
    if body.len() > MAX_BODY {
        *out = Outcome::failed(
            ErrorKind::PayloadTooLarge,
            format!("the body is {} bytes; the limit is 262,144 bytes (256 KiB)", body.len()),
        );
        return;
    }
    // Steps 4 and 5 come before any parsing, so a 429 or an inactive strategy costs no
    // parse however hostile the body.
    let record = matches!(state, Some((_, Mode::Record, _)));
    if let Some((store, mode, _)) = &state {
        let counted = match mode {
            Mode::Record => store.count(&strategy.id, now_ms),
            Mode::Peek => store.peek_count(&strategy.id, now_ms),
        };
        if !counted {
            *out = Outcome::failed(ErrorKind::RateLimited, "rate limit exceeded".into());
            return;
        }
    }
    if strategy.status != Status::Active {
        *out = Outcome::inactive(strategy.status.as_str());
        return;
    }
    // The dedup key is the `metadata.message_id` when there is one, so the body is parsed
    // first; parsing is pure, so no answer changes.
    let parsed = alert::parse(body, content_type);
    let key = dedup_key(body, &parsed);
    if let Some((store, mode, _)) = &state {
        let claim = match mode {
            Mode::Record => store.claim(&strategy.id, &key, now_ms),
            Mode::Peek => store.peek_claim(&strategy.id, &key, now_ms),
        };
        if let Claim::Duplicate { log } = claim {
            *out = Outcome::duplicate();
            if log {
                out.log(Level::Info, "duplicate delivery ignored: the same alert arrived within the last 5 minutes");
            }
            return;
        }
    }
    // Counted and claimed: a removal may go ahead (a failure's release below makes no windows).
    let state = state.map(|(store, mode, registered)| {
        drop(registered);
        (store, mode)
    });
    // Claimed here (a fresh key, recorded): given back below on any answer but 200, and by the guard should
    // deciding or building panic. A host that catches the panic answers 500 (the C ABI does), and the sender's
    // retry must then trade, not be answered `duplicate` for the rest of the window.
    let claimed = Unclaim { store: state.filter(|_| record).map(|(s, _)| s), strategy: &strategy.id, key: &key };

    let key_hex = hex_key(&key);
    decide_and_build(strategy, parsed, &key_hex, now_ms, out);
    if out.http_status == 200 {
        claimed.keep();
    }
    out.dedup_key = Some(key_hex);
}

/// A dedup key claimed for a delivery, given back when dropped unless kept: a failure, or a panic unwinding
/// through [`process`], must not swallow the sender's retry.
struct Unclaim<'a, S: StateStore> {
    store: Option<&'a S>,
    strategy: &'a str,
    key: &'a DedupKey,
}

impl<S: StateStore> Unclaim<'_, S> {
    fn keep(mut self) {
        self.store = None;
    }
}

impl<S: StateStore> Drop for Unclaim<'_, S> {
    fn drop(&mut self) {
        if let Some(store) = self.store {
            store.release(self.strategy, self.key);
        }
    }
}

/// Steps 7 to 10 into `out` (a processed Outcome, replaced by a failure's).
fn decide_and_build(
    strategy: &Strategy,
    parsed: Result<Alerts, ParseError>,
    key_hex: &str,
    now_ms: i64,
    out: &mut Outcome,
) {
    #[cfg(test)]
    if tests::PANIC_IN_BUILD.with(|p| p.replace(false)) {
        panic!("a test's panic while the orders are built");
    }
    let mut alerts = match parsed {
        Ok(a) => a,
        Err(e) => {
            *out = Outcome::failed(ErrorKind::from(&e), e.to_string());
            return;
        }
    };
    let mut logs = Logs::new();
    for a in &alerts {
        logs.push_with(Level::Info, |t| describe(t, a));
    }
    if let Some(reason) = alerts.first().and_then(|a| stale(strategy, a, now_ms)) {
        resolve_words_in(strategy, &mut alerts);
        *out = Outcome::failed(ErrorKind::Rejected, reason);
        attach(out, alerts, logs);
        return;
    }
    match build_orders(strategy, &alerts, &mut logs, key_hex, now_ms, out) {
        Resolution::Words => resolve_words_in(strategy, &mut alerts),
        Resolution::Steps(steps) => resolve(&mut alerts, &steps),
    }
    attach(out, alerts, logs);
}

/// How an Outcome's alerts are resolved once the orders are built.
enum Resolution {
    /// As far as the strategy's rules resolve the action words (a rejection by the rules).
    Words,
    /// To the plan's steps, each (step, action, direction).
    Steps(SmallVec<[(usize, Action, Direction); 2]>),
}

/// Decides `alerts` and builds every bot's orders into `out` (a processed Outcome, replaced
/// by a failure's), without its alerts (they are borrowed here and resolved by the caller as
/// the returned `Resolution` says) and with the log lines after `logs`.
fn build_orders(
    strategy: &Strategy,
    alerts: &Alerts,
    logs: &mut Logs,
    key_hex: &str,
    now_ms: i64,
    out: &mut Outcome,
) -> Resolution {
    let plan = match decide(strategy, alerts) {
        Ok(p) => p,
        Err(refusal) => {
            *out = Outcome::failed(ErrorKind::from(&refusal), refusal.to_string());
            return Resolution::Words;
        }
    };
    for refusal in &plan.skipped {
        logs.push_with(Level::Warn, |t| {
            let _ = write!(t, "skipped: {refusal}");
        });
    }

    // The key is claimed at `now_ms` (a dry run and `validate` answer as a claim now
    // would), so the client order ids are unique per processed delivery.
    let ctx = BuildContext { strategy, now_ms, dedup_key: key_hex, claimed_ms: now_ms };
    let mut orders = Vec::with_capacity(strategy.bots.len() * plan.steps.len());
    let mut refusals = Vec::new();
    let mut failure = None;
    // Per bot, the last request of an earlier step that a later OPEN waits for: a reversal's
    // last close (and, through the chain of closes, every one), or the last cancel of the
    // working entries `cancel: true` pulls (should any of them fail, that entry having filled, the
    // new one stays home: the host checks every pull of the chain). A few bots: a list, not a map.
    let mut awaited: Vec<(&str, ClientOrderId)> = Vec::new();
    fn awaits<'b>(awaited: &mut Vec<(&'b str, ClientOrderId)>, bot: &'b str, last: ClientOrderId) {
        match awaited.iter_mut().find(|(b, _)| *b == bot) {
            Some(entry) => entry.1 = last,
            None => awaited.push((bot, last)),
        }
    }
    // Bots whose close the broker's format refused: a reversal's new side stays home there,
    // or the bot would hold both sides.
    let mut close_refused: Vec<&str> = Vec::new();
    // Bots whose working entries `cancel: true` pulls ahead of an entry, with where those cancels start in `orders`:
    // should the bot refuse the entry, its cancels go too. Kept, the alert was answered processed with only the
    // cancel sent, the resting entry gone and nothing in its place.
    let mut pulled: Vec<(&str, usize, usize)> = Vec::new();
    'steps: for decided in &plan.steps {
        let closing = decided.action == Action::Close;
        // A close that a new side follows goes out as a chain (one order per option
        // structure, each after the one before), so the new side, waiting for the last,
        // waits for every one: `after` names a single request.
        let opens_after = plan.steps.iter().any(|d| d.step > decided.step && d.action == Action::Open);
        let chain_closes = closing && opens_after;
        // The cancels of `cancel: true` before an entry: the entry waits for them.
        let pulls = decided.action == Action::Cancel && opens_after;
        for bot in &strategy.bots {
            let mark = orders.len();
            let id: &str = &bot.id;
            if decided.action == Action::Open && close_refused.contains(&id) {
                refusals.push(format!(
                    "bot {}: OPEN {} {} is not sent, since its close of the other side was refused",
                    bot.id, decided.direction, decided.alert.instrument
                ));
                continue;
            }
            let mut after_close = match decided.action {
                Action::Open => awaited.iter().position(|(b, _)| *b == id).map(|i| awaited.swap_remove(i).1),
                _ => None,
            };
            let mut refused_beside = None;
            let built = builder::build_inline(&ctx, decided, bot).and_then(|mut actions| {
                // The close refused as nothing left to close, its market entries' cancels still going: told beside.
                refused_beside = actions.refused.take();
                // One position's closes cut into several orders go out one after another, as a reversal's do.
                let chained = std::mem::take(&mut actions.chained);
                let mut index = 0;
                let mut cancelled: Option<ClientOrderId> = None;
                let mut placed: Option<ClientOrderId> = None;
                actions.try_each(|a| {
                    let request = broker::format(bot.broker, &bot.account_id, &a)?;
                    let (kind, client_order_id) = match &a {
                        BotAction::Place(o) => (RequestKind::Place, o.client_order_id),
                        BotAction::Replace { order, .. } => (RequestKind::Replace, order.client_order_id),
                        BotAction::Cancel { order, .. } => (RequestKind::Cancel, order.client_order_id),
                    };
                    let mut after = None;
                    // A place right after a cancel in one bot's actions is the second half of a
                    // cancel-and-replace, or a close after the cancel of the position's working
                    // exits: it may go out only once that cancel has succeeded. A reversal's new
                    // side goes out only once its close has.
                    let chain_this = chained.get(index).copied().unwrap_or(false);
                    index += 1;
                    if kind == RequestKind::Place {
                        after = if closing {
                            placed.filter(|_| chain_closes || chain_this).or(cancelled)
                        } else {
                            cancelled.take().or_else(|| after_close.take())
                        };
                        if closing {
                            placed = Some(client_order_id);
                            awaits(&mut awaited, id, client_order_id);
                        }
                    } else if kind == RequestKind::Cancel {
                        // A close's cancels of working exits go out one after another, so the
                        // close, waiting for the last, waits for all of them; so do the cancels an
                        // entry waits for. A reversal's new side waits for a close's cancels too:
                        // with no position, a CLOSE is the cancel of its working market entry alone,
                        // which could fill beside the new side (a close placed after it is awaited in
                        // its place).
                        if closing || pulls {
                            after = cancelled;
                        }
                        cancelled = Some(client_order_id);
                        if pulls || closing {
                            awaits(&mut awaited, id, client_order_id);
                        }
                    }
                    // Made where it is pushed: a request is a few hundred bytes.
                    orders.push(order_request(bot, a, request, after));
                    Ok(())
                })
            });
            match built {
                Ok(()) => {
                    if pulls && orders.len() > mark {
                        pulled.push((id, mark, orders.len()));
                    }
                    // Nothing left to close: not a refused close, so a reversal's new side goes ahead.
                    if let Some(e) = refused_beside {
                        refusals.push(format!("bot {}: {e}", bot.id));
                    }
                }
                Err(e) => match ErrorKind::from(&e) {
                    ErrorKind::Rejected => {
                        // A bot's orders go out whole or not at all.
                        orders.truncate(mark);
                        let mut why = format!("bot {}: {e}", bot.id);
                        if decided.action == Action::Open {
                            if let Some(i) = pulled.iter().position(|(b, _, _)| *b == id) {
                                let (_, from, to) = pulled.swap_remove(i);
                                orders.drain(from..to);
                                for p in &mut pulled {
                                    if p.1 >= to {
                                        p.1 -= to - from;
                                        p.2 -= to - from;
                                    }
                                }
                                why.push_str(" (its working entries are left as they were)");
                            }
                        }
                        refusals.push(why);
                        // Contracts that no longer trade are settled by the broker, and a coin balance all below the
                        // pair's base increment (the dust an earlier close leaves) or its minimum order size cannot be
                        // sold: nothing is left to close, and a reversal's new side goes ahead, as with nothing to close. Held back, every
                        // later `closelongbuy` on the pair lost its entry to the dust.
                        if closing && !builder::nothing_left_to_close(&e) {
                            close_refused.push(id);
                        }
                    }
                    kind => {
                        failure = Some((kind, format!("bot {}: {e}", bot.id)));
                        break 'steps;
                    }
                },
            }
        }
    }
    // The plan borrows the alerts; once orders are built the caller resolves them in place.
    let steps = Resolution::Steps(plan.steps.iter().map(|d| (d.step, d.action, d.direction)).collect());
    if let Some((kind, cause)) = failure {
        // All or nothing: no bot's order goes out, so the sender's retry cannot double one.
        *out = Outcome::failed(kind, cause);
        return steps;
    }
    if orders.is_empty() && !refusals.is_empty() {
        *out = Outcome::failed(ErrorKind::Rejected, refusals.join("; "));
        return steps;
    }
    for r in refusals {
        logs.push_with(Level::Warn, |t| {
            t.push_str("rejected for ");
            t.push_str(&r);
        });
    }
    if orders.is_empty() {
        logs.push(Level::Warn, "no bot had an order to place for this alert");
    }
    for req in &orders {
        logs.push_with(Level::Info, |t| describe_order(t, req));
    }
    out.orders = orders;
    steps
}

/// The request for one bot action, formatted as `request`, sent after `after`.
#[inline(always)]
fn order_request(
    bot: &crate::strategy::Bot,
    action: BotAction,
    request: broker::Request,
    after: Option<ClientOrderId>,
) -> OrderRequest {
    let (kind, order, order_id, keeps) = match action {
        BotAction::Place(o) => (RequestKind::Place, o, None, None),
        BotAction::Replace { order_id, order, .. } => {
            (RequestKind::Replace, order, Some(order_id), Some(bot.broker.broker().replace_keeps_id()))
        }
        BotAction::Cancel { order_id, order } => (RequestKind::Cancel, order, Some(order_id), None),
    };
    OrderRequest {
        bot: Arc::clone(&bot.id),
        broker: bot.broker,
        kind,
        client_order_id: order.client_order_id,
        order_id,
        keeps_order_id: keeps,
        after,
        request,
        order,
    }
}

/// The canonical alerts after the rules, in place: action words resolved, directions
/// filled in, skipped steps (a reversal's CLOSE with nothing to close) left out.
fn resolve(alerts: &mut Alerts, steps: &[(usize, Action, Direction)]) {
    let mut i = 0;
    alerts.retain(|a| {
        let step = i;
        i += 1;
        match steps.iter().find(|(s, _, _)| *s == step) {
            Some(&(_, action, direction)) => {
                // A word's `prevMarketPosition` was judged with its rules; beside the canonical action it would be
                // judged again by the bots' side (a fading strategy's exit, sent back, was refused).
                if matches!(a.action, alert::ActionKind::Word(_)) {
                    a.held_before = None;
                }
                a.action = alert::ActionKind::Canonical(action);
                a.direction = Some(direction);
                true
            }
            None => false,
        }
    });
}

/// The alerts as far as the strategy's rules resolve them, in place (for a rejection).
fn resolve_words_in(strategy: &Strategy, alerts: &mut Alerts) {
    for a in alerts.iter_mut() {
        let alert = std::mem::replace(a, Alert::new(a.action, CompactString::const_new("")));
        *a = resolve_words(strategy, alert);
    }
}

/// Why an alert is too old to trade: older than the strategy's `max_alert_age` or the
/// sender's own `max_lag`, both in seconds (the smaller where both are set), counted from the time the alert
/// carries. Under `max_alert_age` alone an alert without a time is never stale. One whose time is further ahead of
/// the clock than the limit is refused too: its age cannot be told (a time written without an offset is
/// read as UTC, so a sender east of UTC writing local time was hours "ahead", and never
/// stale however late it came). Under either limit, one whose time reads as no time is refused: its age
/// cannot be checked, and passed unchecked, an hour-late alert traded. A `max_lag` sent with no time at all is
/// refused too: the sender asked for a bound that cannot be checked.
fn stale(strategy: &Strategy, alert: &Alert, now_ms: i64) -> Option<String> {
    let limits = [(strategy.max_alert_age, "the strategy's max_alert_age"), (alert.max_lag_s, "the alert's max_lag")];
    let (limit, what) = limits.into_iter().filter_map(|(l, what)| l.map(|l| (l, what))).min_by_key(|(l, _)| *l)?;
    if let Some(u) = &alert.unread_time {
        return Some(format!(
            "`{}` is {:?}, which reads as no time, so the alert's age cannot be checked against {what} of {limit} s: \
             send an ISO 8601 time (`2024-01-15T14:30:00Z`) or Unix seconds or milliseconds",
            u.key, u.value
        ));
    }
    let Some(sent) = alert.sent_at_ms else {
        let lag = alert.max_lag_s?;
        return Some(format!(
            "the alert's max_lag of {lag} s asks for a bound on its age, but the alert carries no time, so its age \
             cannot be checked: send the alert's time beside it (`timestamp` or `timenow`, such as \
             `2024-01-15T14:30:00Z`), or leave max_lag out"
        ));
    };
    let limit_ms = i64::try_from(limit).ok()?.checked_mul(1000)?;
    let ahead_ms = sent.saturating_sub(now_ms);
    if ahead_ms > limit_ms {
        return Some(format!(
            "the alert's time is {} ahead of this clock, more than {what} of {limit} s, so how old it is cannot be \
             told: send the time with its offset (`Z` or `+01:00`), or fix the sender's clock",
            age(ahead_ms)
        ));
    }
    let age_ms = now_ms.checked_sub(sent).filter(|a| *a > 0)?;
    (age_ms > limit_ms).then(|| {
        format!(
            "stale alert: it was made {} ago, more than {what} of {limit} s; a delayed alert is not traded at an old price",
            age(age_ms)
        )
    })
}

/// An age in whole seconds, or minutes and seconds, or hours and minutes.
fn age(ms: i64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{}.{:03} s", s, ms % 1000),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// The outcome with the alerts, and the delivery's log records before its own.
fn attach(o: &mut Outcome, alerts: Alerts, mut logs: Logs) {
    o.alerts = alerts;
    logs.append(&o.logs);
    o.logs = logs;
}

/// `parsed OPEN LONG AAPL @ 190.25`, written into the delivery's log text.
fn describe(s: &mut String, a: &Alert) {
    s.push_str("parsed ");
    s.push_str(a.action.as_str());
    if let Some(d) = a.direction {
        s.push(' ');
        s.push_str(d.as_str());
    }
    s.push(' ');
    s.push_str(&a.instrument);
    if let Some(p) = a.price {
        s.push_str(" @ ");
        crate::decimal::write(s, p);
    }
    if !a.legs.is_empty() {
        let _ = write!(s, " ({} legs)", a.legs.len());
    }
}

/// `{verb} bot {bot} ({broker}): {method} {path}`, written into the delivery's log text.
fn describe_order(s: &mut String, r: &OrderRequest) {
    let verb = match r.kind {
        RequestKind::Place => "order for",
        RequestKind::Replace => "change of a working order for",
        RequestKind::Cancel => "cancel of a working order for",
    };
    // One push each, not a loop over the pieces: the fixed ones are then copied as
    // constants rather than through a call each.
    s.push_str(verb);
    s.push_str(" bot ");
    s.push_str(&r.bot);
    s.push_str(" (");
    s.push_str(r.broker.as_str());
    s.push_str("): ");
    s.push_str(r.request.method.as_str());
    s.push(' ');
    s.push_str(&r.request.path);
}

/// The dedup key: SHA-256 of the sender's `message_id` (domain-separated) when given,
/// else SHA-256 of the raw body. A body whose alert did not parse keeps its `message_id`
/// as the key too: the dedup check comes before the parse's answer (a 422 or a rejection),
/// so a resend under an id already seen is a duplicate whatever else it says.
pub fn dedup_key(body: &[u8], parsed: &Result<Alerts, ParseError>) -> DedupKey {
    let id = match parsed {
        Ok(alerts) => alerts.first().and_then(|a| a.message_id.as_deref()).map(Cow::Borrowed),
        Err(_) => alert::message_id_of_unparsed(body).map(|id| Cow::Owned(id.into_string())),
    };
    match id {
        Some(id) => message_id_key(id.as_bytes()),
        None => Sha256::digest(body).into(),
    }
}

/// What the message-id key is hashed after: keeps it apart from the hash of a body.
const MESSAGE_ID_DOMAIN: &[u8] = b"strategy-webhook message_id\0";

/// SHA-256 of the domain and a message id (one block, compressed directly, for an id of up
/// to 27 bytes: [`crate::digest`]).
fn message_id_key(id: &[u8]) -> DedupKey {
    digest::sha256(&[MESSAGE_ID_DOMAIN, id])
}

/// Reads a dedup key written by [`hex_key`] (an Outcome's `dedup_key`).
pub fn parse_hex_key(s: &str) -> Option<DedupKey> {
    HexKey::parse(s)
}

/// A dedup key as an Outcome's `dedup_key` carries it: 64 lowercase hexadecimal characters (what a host stores
/// and claims), held inline.
pub fn hex_key(key: &DedupKey) -> HexKey {
    HexKey::of(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Makes this thread's next build panic (see [`decide_and_build`]).
        pub(super) static PANIC_IN_BUILD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// A panic while the orders were built left the dedup key claimed: the host caught it and answered 500 (the
    /// C ABI does), and the sender's retry was answered `duplicate` for five minutes, the alert lost. The key is
    /// given back as on any other failure; the retry trades.
    #[test]
    fn a_panic_while_building_gives_the_key_back() {
        let token = "a".repeat(64);
        let snapshot = format!(
            r#"{{"id":"s1","token_hash":"{token}","status":"active","asset_class":"equity","order_type":"market",
                "allowed_instruments":["AAPL"],"directions":{{"long":true,"short":false}},
                "bots":[{{"id":"b","broker":"{broker}","account_id":"PA1","sizing":{{"fixed_quantity":"1"}}}}]}}"#,
            broker = crate::broker::BrokerId::ALL[0].as_str()
        );
        let e = Engine::new();
        e.upsert_json(snapshot.as_bytes()).unwrap();
        let body = br#"{"ticker":"AAPL","action":"OPEN","direction":"LONG","metadata":{"message_id":"m-1"}}"#;
        let now = 1_705_676_400_000;
        PANIC_IN_BUILD.with(|p| p.set(true));
        let caught = std::panic::catch_unwind(|| e.deliver(token.as_bytes(), body, None, now));
        assert!(caught.is_err(), "the build panicked");
        let retry = e.deliver(token.as_bytes(), body, None, now + 1_000);
        assert_eq!(retry.decision, crate::outcome::Decision::Processed, "{}", retry.to_json());
        assert_eq!(retry.orders.len(), 1);
        assert_eq!(e.deliver(token.as_bytes(), body, None, now + 2_000).decision, crate::outcome::Decision::Duplicate);
    }

    /// The one-block path gives the streaming hasher's digest at every id length, across
    /// the 27/28-byte edge where it hands over: stored keys and client order ids depend on it.
    #[test]
    fn message_id_keys_match_the_streaming_hash() {
        for len in 0..=80 {
            let id: Vec<u8> = (0..len).map(|i| b"abcdefghijklmnopqrstuvwxyz0123456789-_"[i % 38]).collect();
            let mut h = Sha256::new();
            h.update(b"strategy-webhook message_id\0");
            h.update(&id);
            let want: DedupKey = h.finalize().into();
            assert_eq!(message_id_key(&id), want, "id of {len} bytes");
        }
        // A known digest, so that both paths cannot drift together.
        // (Python: hashlib.sha256(b"strategy-webhook message_id\0tv-8c1f2a").hexdigest())
        assert_eq!(
            hex_key(&message_id_key(b"tv-8c1f2a")),
            "9e818fef109a79cd751770ea1c9a1a41cf2294e10cb9f90aee21f3bc15244fa6"
        );
    }
}
