//! State that outlives one call: per-strategy rate windows, dedup windows and the
//! duplicate-log throttle. Behind [`StateStore`] so a host can keep it elsewhere (for
//! example a shared store when several servers answer the same webhooks).

use smallvec::SmallVec;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A dedup key: SHA-256 of the raw body, or of the sender's `message_id`.
pub type DedupKey = [u8; 32];

/// A dedup key as text: 64 lowercase hexadecimal characters, as an Outcome's
/// `dedup_key` carries it and a host stores it. Held inline, so an Outcome pays no
/// allocation for it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HexKey([u8; 64]);

impl HexKey {
    /// The key's text.
    pub fn of(key: &DedupKey) -> HexKey {
        let mut out = [0u8; 64];
        crate::digest::hex_into(&mut out, key);
        HexKey(out)
    }

    /// Reads 64 hexadecimal characters (either case) back into the key.
    pub fn parse(s: &str) -> Option<DedupKey> {
        let b = s.as_bytes();
        if b.len() != 64 {
            return None;
        }
        let nibble = |c: u8| (c as char).to_digit(16).map(|v| v as u8);
        let mut key = [0u8; 32];
        for (i, k) in key.iter_mut().enumerate() {
            *k = nibble(b[2 * i])? << 4 | nibble(b[2 * i + 1])?;
        }
        Some(key)
    }

    /// The 64 characters.
    pub fn as_str(&self) -> &str {
        // Hexadecimal digits only, written by `of`.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::ops::Deref for HexKey {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for HexKey {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for HexKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for HexKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for HexKey {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for HexKey {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl serde::Serialize for HexKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The limits a store enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Alerts allowed per webhook within `rate_window_ms` (60).
    pub rate_limit: u32,
    /// The rate window (60,000 ms).
    pub rate_window_ms: i64,
    /// The dedup window (300,000 ms).
    pub dedup_window_ms: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { rate_limit: 60, rate_window_ms: 60_000, dedup_window_ms: 300_000 }
    }
}

/// What the store says about a delivery's dedup key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The key was seen within the window. `log` is true the first time in the window.
    Duplicate {
        /// Whether this duplicate should leave a log row.
        log: bool,
    },
    /// A new key, now claimed: release it if the outcome is not a 200.
    Fresh,
}

/// Per-strategy windows, keyed by the strategy's id (not its token, so a token
/// rotation keeps them). Each call must be atomic per strategy: two identical deliveries
/// racing each other get one `Fresh` and one `Duplicate`, and concurrent deliveries never
/// count past the rate limit.
///
/// An [`Engine`](crate::Engine) calls `count` and `claim` under its registry's read lock (so that a strategy removed
/// meanwhile leaves no window behind): keep them short and free of network round trips. A store that waits there
/// holds up every `upsert`, `unload` and `remove` for as long, and the standard library's lock lets no new reader in
/// while one of those waits, so every delivery, of every strategy, waits too. A host whose windows live in a
/// database keeps this store in memory and makes the durable claim in its own transaction after the call (the
/// reference server's shared PostgreSQL store does so), or calls the parse and [`decide`](crate::decide::decide)
/// itself.
pub trait StateStore: Send + Sync {
    /// Counts a delivery against the rate window; `false` means over the limit (a 429),
    /// and then nothing is recorded.
    fn count(&self, strategy: &str, now_ms: i64) -> bool;
    /// Claims a dedup key, or reports it as a duplicate within the window.
    fn claim(&self, strategy: &str, key: &DedupKey, now_ms: i64) -> Claim;
    /// Gives a claimed key back (the outcome was an error), so the sender's retry trades once.
    fn release(&self, strategy: &str, key: &DedupKey);
    /// What `count` would answer, recording nothing (for dry runs).
    fn peek_count(&self, strategy: &str, now_ms: i64) -> bool;
    /// What `claim` would answer, recording nothing (for dry runs).
    fn peek_claim(&self, strategy: &str, key: &DedupKey, now_ms: i64) -> Claim;
    /// Drops a strategy's state.
    fn forget(&self, strategy: &str);
}

/// The in-memory store: strategies spread by id over 64 small locks, each held for one
/// count or claim (tens of nanoseconds; a sweep of a full window's expired keys, about a
/// microsecond), so deliveries for different strategies rarely wait on each other, and then
/// only that long.
///
/// One lock per call is the whole cost of finding a strategy's windows: a map behind a
/// shared lock with a lock per strategy inside took four atomic updates per call, and
/// those were most of a call's time.
#[derive(Debug)]
pub struct MemoryStore {
    limits: Limits,
    /// Picks a strategy's shard.
    spread: Keyed,
    shards: Box<[Shard]>,
}

/// log2 of the number of shards.
const SHARD_BITS: u32 = 6;

/// One shard's strategies, on a cache line of its own so that neighbouring shards'
/// locks do not slow each other. Keyed by the id's hash, which a call computes once for
/// both the shard and the map; ids whose 64-bit hashes collide share one entry's list.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Shard(Mutex<HashMap<u64, Strategies, Prehashed>>);

/// The strategies whose ids have one hash (almost always one), with their windows.
type Strategies = Vec<(Box<str>, Windows)>;

/// Hands a shard's map the id's hash as it is, turned so that the bits that chose the
/// shard (the same for every id in it) are not the ones the map reads first.
#[derive(Debug, Default, Clone, Copy)]
struct Prehashed;

impl BuildHasher for Prehashed {
    type Hasher = PrehashedHasher;
    fn build_hasher(&self) -> PrehashedHasher {
        PrehashedHasher(0)
    }
}

/// See [`Prehashed`].
#[derive(Debug)]
struct PrehashedHasher(u64);

impl Hasher for PrehashedHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; any other input is folded in, to stay total.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.rotate_left(SHARD_BITS);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new(Limits::default())
    }
}

/// One strategy's windows. Memory is bounded by the rate limit: at most
/// `rate_limit × dedup_window / rate_window` live keys (300 by default).
#[derive(Debug, Default)]
pub struct Windows {
    /// Times of the deliveries counted in the current rate window, oldest first.
    /// Each with the time it was counted at as the host gave it: a step moves the first, and
    /// [`MemoryStore::uncount`] finds a mark by the second (matched by its moved time, a mark a step had moved was
    /// not found, and one POST decided again stayed counted twice).
    rate: VecDeque<(i64, i64)>,
    /// First 128 bits of the dedup key → first-seen time × 4, plus [`STEPPED`] while a pending clock step
    /// ([`Windows::step`]) moved the key or it was claimed since, plus [`LOGGED`] once a duplicate was logged.
    /// 24-byte entries keep a full window within budget even after churn
    /// has grown the table to its steady 1,024 buckets; a 128-bit prefix of SHA-256
    /// cannot collide by accident among a few hundred live keys.
    seen: HashMap<ShortKey, i64, Keyed>,
    /// No entry of `seen` expires before this time, so expiry sweeps run only when
    /// something can expire. (Sweeps spaced further apart would save little, as the rate
    /// limit bounds them to one per delivery, and they let expired keys pile up in batches
    /// whose removal leaves the table's tombstones to double it at times: 26 KB instead of
    /// 13 KB for a full window in some runs.) An expired key not yet swept is never answered
    /// as a duplicate: every read checks the time.
    sweep_at: i64,
    /// The latest time any entry was made at. A host's clock stepped back (corrected, or restored marks from a
    /// run whose clock was ahead) leaves entries in the future of `now`, which a window measured from their time
    /// would keep for as long as the step, answering 429 or `duplicate` for minutes: they are dealt with first
    /// ([`Windows::rewind`]), so a key keeps the age it had and a rate mark does not last past the step.
    latest: i64,
    /// The latest entry's time before `latest` was last raised (the first entry's own time at first): where a
    /// `latest` no clock reads ([`LAST_PLAUSIBLE_MS`]) came from, the clock keys are aged from once a delivery comes
    /// back ([`Windows::step_back`]).
    prior: i64,
    /// The latest time a delivery was counted or a key claimed or restored at: the latest a key's age may be
    /// measured from. A rate mark restored from a run whose clock was ahead (a host that rewinds its stored keys to
    /// its clock but not its marks) is no delivery on this clock: a step measured from it aged every key by the
    /// gap, and a resend trades twice.
    on_time: i64,
    /// The steps back not yet told apart from one delivery's time out of line, the latest last: each from the
    /// clock of the one before it ([`Windows::rewind`]).
    steps: SmallVec<[Step; MAX_PENDING_STEPS]>,
}

/// A step back of the clock, from the latest entry's time to the time of the delivery that showed it. Until a
/// later delivery tells which it was, it may be the clock corrected or a single time out of line (a thread
/// stalled after reading the clock, a host passing 0 once): see [`Windows::rewind`].
#[derive(Debug, Clone, Copy)]
struct Step {
    /// The latest entry's time before the step.
    from: i64,
    /// The time the clock went back to.
    to: i64,
    /// The deliveries counted since (the step's own included).
    counted: u32,
    /// The step came back from a time no clock reads ([`LAST_PLAUSIBLE_MS`]), one time far out of line: `from` is
    /// the clock before it, the step is kept by a time a window or more past it, and a step back after it takes
    /// its place ([`Windows::rewind`]).
    ahead: bool,
}

impl Step {
    /// How far back the clock went.
    fn size(&self) -> i64 {
        self.from.saturating_sub(self.to)
    }
}

/// A step back as [`Windows::step_back`] makes it.
#[derive(Debug, Clone, Copy)]
struct StepBack {
    /// The time the step runs from (its [`Step::from`]), and keys' ages are measured from.
    origin: i64,
    /// See [`Step::ahead`].
    ahead: bool,
    /// The latest entry was one time ahead of the clock the delivery is on ([`Windows::step_back`]): no key
    /// moves and no step is taken; only the rate marks later than the delivery come back to it.
    returned: bool,
}

/// What a delivery's time tells of the clock, against the windows' latest entry and pending step.
#[derive(Debug, Clone, Copy)]
enum Turn {
    /// Nothing new: the clock runs on as before.
    Steady,
    /// The clock went back by more than [`CLOCK_STEP_MS`].
    Back,
    /// The latest `undone` pending steps were times out of line: the time is back on the clock before them (the
    /// latest undone first). Then, if `kept`, the clock the time is on has run on past the step below them: that
    /// one and those before it were the clock corrected.
    Settled { undone: usize, kept: bool },
}

/// The first 128 bits of a dedup key. Hashed by its first 64 bits alone: they are
/// SHA-256 output, already spread evenly, so one keyed multiply places them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ShortKey([u8; 16]);

impl Hash for ShortKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut half = [0u8; 8];
        half.copy_from_slice(&self.0[..8]);
        state.write_u64(u64::from_le_bytes(half));
    }
}

fn short(key: &DedupKey) -> ShortKey {
    let mut k = [0u8; 16];
    k.copy_from_slice(&key[..16]);
    ShortKey(k)
}

/// The hasher of the store's two maps: a multiply-fold keyed per store, several times
/// cheaper than the standard SipHash on the short keys here (a strategy id, 64 bits of a
/// SHA-256). Neither map needs SipHash's defence against chosen collisions: strategy ids
/// come from the host's snapshots, and a sender who could steer dedup keys into one
/// bucket (grinding SHA-256 against a key they cannot see) still fills at most
/// `rate_limit × dedup_window / rate_window` entries per strategy.
#[derive(Debug, Clone, Copy)]
struct Keyed(u64);

impl Default for Keyed {
    fn default() -> Self {
        // The standard library's per-process random keys, drawn once per map.
        Keyed(std::collections::hash_map::RandomState::new().hash_one(0x5157_4845_u64) | 1)
    }
}

impl BuildHasher for Keyed {
    type Hasher = KeyedHasher;
    fn build_hasher(&self) -> KeyedHasher {
        KeyedHasher(self.0)
    }
}

/// See [`Keyed`].
#[derive(Debug)]
struct KeyedHasher(u64);

/// The fractional part of the golden ratio, as in Fibonacci hashing.
const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for KeyedHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Whole words are read as such: a tail copied byte by byte into a word and read
        // back stalls the load behind the stores, which cost as much as the rest of the hash.
        let n = bytes.len();
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let half = |i: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&bytes[i..i + 4]);
            u64::from(u32::from_le_bytes(w))
        };
        let last = if n >= 8 {
            let mut i = 0;
            while i + 8 <= n {
                self.write_u64(word(i));
                i += 8;
            }
            if i == n {
                return;
            }
            // The last eight bytes, overlapping the words before.
            word(n - 8)
        } else if n >= 4 {
            half(0) | half(n - 4) << 32
        } else if n > 0 {
            u64::from(bytes[0]) | u64::from(bytes[n / 2]) << 8 | u64::from(bytes[n - 1]) << 16
        } else {
            0
        };
        // The length keeps inputs that share these bytes apart ("ab" and "abb").
        self.write_u64(last ^ ((n as u64) << 56));
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        // A 64×64→128 multiply folded back to 64 bits mixes every input bit into the
        // high bits (the table's tag) and the low bits (its bucket).
        let m = u128::from(self.0 ^ n) * u128::from(SPREAD);
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The bit of a key's packed time set once a duplicate of it was logged.
const LOGGED: i64 = 1;

/// The bit of a key's packed time set while a pending step may still be undone and the key is on the stepped
/// clock: moved back by the step, or claimed since. Undoing the step moves exactly these forward by its size.
const STEPPED: i64 = 2;

fn seen_at(packed: i64) -> i64 {
    packed >> 2
}

/// A host's time brought into the range a key's packed time holds (`at << 2` keeps 62 bits): past it the shift
/// lost the top bits, and a repeat at such a time was processed again. Every window uses the same clamped time.
fn packable(now: i64) -> i64 {
    now.clamp(i64::MIN >> 2, i64::MAX >> 2)
}

fn logged(packed: i64) -> bool {
    packed & LOGGED != 0
}

/// A time (a key's, a rate mark's) once the clock went back from `origin` to `now`: it keeps the age it had at
/// `origin` (one later than `origin`, only after a time far ahead, is taken as new).
///
/// Every entry moves, however old: an entry seen before `now` left where it was counted the step longer on the new
/// clock, so a key 290 s old at a 200 s step held a new alert `duplicate` for 200 s more, and a rate mark answered
/// 429 as long. Moved further back than its age, a key would expire early and let a resent alert trade twice.
///
/// Where the step happened between `origin` (the latest entry) and `now` cannot be told: ages are measured from
/// `origin`, so each is taken as younger than it is by the real time that passed between the latest entry and the
/// delivery that shows the step. The error is on the side of a duplicate (a new alert held for that long once its
/// window is over), not of a second trade of one alert, which a sender cannot undo; with deliveries coming steadily
/// it is the gap between two of them.
fn aged_back(at: i64, origin: i64, now: i64) -> i64 {
    packable(now.saturating_sub(origin.saturating_sub(at).max(0)))
}

/// A key once the clock went back from `origin` to `now`: it keeps its age ([`aged_back`]) and is marked
/// [`STEPPED`], so undoing the step moves it forward again.
fn stepped_back(packed: i64, origin: i64, now: i64) -> i64 {
    aged_back(seen_at(packed), origin, now) << 2 | STEPPED | packed & LOGGED
}

/// A rate mark once `step` is undone: as [`stepped_forward`] moves a key, every mark being on the stepped clock
/// (moved back by it, or counted since).
fn mark_forward(t: i64, step: Step, until: i64) -> i64 {
    t.saturating_add(step.size()).min(until)
}

/// A key once `step` is undone: one on the stepped clock goes forward by the step's size, but not past `until`
/// (a key claimed on the stepped clock was seen no later than the delivery that undoes it). It stays marked: every
/// key on a step's clock is on the clock of the step below it too (moved by it, or claimed since).
fn stepped_forward(packed: i64, step: Step, until: i64) -> i64 {
    if packed & STEPPED == 0 {
        return packed;
    }
    seen_at(packed).saturating_add(step.size()).min(until) << 2 | packed & (LOGGED | STEPPED)
}

/// Which rate marks (oldest counted first) a delivery at `now` lets go: the expired ones at the front. A mark
/// still counted holds those behind it (a stalled thread's mark, stamped early, counts as long as the one counted
/// before it), except one more than [`CLOCK_STEP_MS`] ahead of `now` (left ahead by a time out of line the clock
/// came back from, [`Windows::rewind`]): it counts until its own time expires, and those behind it go by theirs, or
/// one such mark an hour ahead held every later one for the hour, every delivery answered 429. The answer stops at
/// the first mark that holds the rest (absent: kept): a delivery reads the front of the window, not every mark (a
/// high `rate_limit` keeps a minute of marks, each delivery scanned them all).
fn gone_marks(marks: impl Iterator<Item = i64>, now: i64, window: i64) -> SmallVec<[bool; 64]> {
    let mut gone = SmallVec::new();
    for t in marks {
        let expired = now.saturating_sub(t) >= window;
        if !expired && t <= now.saturating_add(CLOCK_STEP_MS) {
            break;
        }
        gone.push(expired);
    }
    gone
}

/// How far behind the latest entry a delivery's time may be before the clock is taken to have gone back. Times a
/// little out of order are ordinary: each thread reads the clock before it waits for the strategy's lock (or for
/// a CPU pool), and taken for a step, they let the rate marks just counted go, so every other delivery of a
/// concurrent burst got past the limit. A step this small only makes the windows last as much longer.
const CLOCK_STEP_MS: i64 = 30_000;

/// The latest time a clock in milliseconds reads for now (2200-01-01): a later one is a host's mistake (microseconds
/// or nanoseconds passed once), taken for one time far out of line ([`Step::ahead`]) when a delivery comes back
/// before it.
const LAST_PLAUSIBLE_MS: i64 = 7_258_118_400_000;

/// The most keys seen past [`LAST_PLAUSIBLE_MS`] kept (a host passing microseconds): a full window at the default
/// limits holds 300.
const FAR_KEYS_KEPT: usize = 300;

/// How many deliveries on a stepped clock keep the step (with the last more than [`CLOCK_STEP_MS`] past it): two
/// threads stalled at once are two times out of line; a corrected clock brings every delivery after it.
const STEP_KEPT_AFTER: u32 = 4;

/// The most steps back pending at once. A step back while others are pending goes on top of them; with this many,
/// the oldest is taken for the clock corrected. Three stalled threads among a corrected clock's first deliveries are
/// well within it.
const MAX_PENDING_STEPS: usize = 4;

impl Windows {
    /// What a delivery at `now` tells of the clock. A step is kept once [`STEP_KEPT_AFTER`] deliveries came on the
    /// clock it went to, the last more than [`CLOCK_STEP_MS`] past it: kept at a second delivery 30 s past it, one
    /// more time out of line (two threads stalled) passed for the corrected clock, and the first outlier's keys
    /// stayed moved back, their alerts' retries trading again; kept only a whole dedup window past it, a correction
    /// of a few minutes with deliveries all along was undone as the new clock reached the old time, and its keys,
    /// moved forward by the step, answered a new alert `duplicate`.
    ///
    /// A step from a time far ahead ([`Step::ahead`]) is kept, not undone, by a time a dedup window or more past
    /// it: that is another time far out of line (a host passing microseconds twice), and undone by it, the keys
    /// claimed on the clock since were moved forward to the first, then aged from the second (a retry traded again).
    fn turn(&self, now: i64, window: i64) -> Turn {
        if now < self.latest.saturating_sub(CLOCK_STEP_MS) {
            return Turn::Back;
        }
        // From the latest step down: a time back on the clock before a step undoes it, and may be back on the
        // clock before the one below too (two stalled threads, or an outlier while a corrected clock is pending).
        let mut undone = 0;
        for step in self.steps.iter().rev() {
            if step.counted >= STEP_KEPT_AFTER && now > step.to.saturating_add(CLOCK_STEP_MS) {
                return Turn::Settled { undone, kept: true };
            }
            if now < step.from.saturating_sub(CLOCK_STEP_MS) {
                break;
            }
            if step.ahead && now >= step.from.saturating_add(window) {
                return Turn::Settled { undone, kept: true };
            }
            undone += 1;
        }
        match undone {
            0 => Turn::Steady,
            _ => Turn::Settled { undone, kept: false },
        }
    }

    /// The step a delivery at `now` makes back: where it runs from, and the time keys' ages are measured from.
    ///
    /// A step while others are pending runs from the clock of the latest, and goes on top of it ([`Windows::rewind`]).
    /// Run from the clock before the pending one (that step undone first), the deliveries after an outlier on a
    /// corrected clock were neither back before the new step nor a step back from it: every key, aged from the old
    /// clock, expired on the corrected one, and the whole window's resends traded again.
    ///
    /// A step back from a `latest` no clock reads ([`LAST_PLAUSIBLE_MS`]) is taken for that time out of line
    /// ([`Step::ahead`]): keys are aged from the time before it (with none, from now), and the step runs from there.
    ///
    /// A plausible latest entry more than [`CLOCK_STEP_MS`] past the one before it, followed by a delivery at or
    /// after that one, is taken for one time ahead of the clock (a host passing local time for UTC once): aged from
    /// it, every key was aged by the jump and expired, and the resends of the whole window traded again. No key
    /// moves: should the jump have been real time and the delivery a stalled thread, or the clock corrected, a
    /// key is at worst held as much longer. A delivery before the entry before the jump shows the clock itself went
    /// back, and is a step as any other.
    fn step_back(&self, now: i64) -> StepBack {
        let jumped = self.latest <= LAST_PLAUSIBLE_MS && self.latest > self.prior.saturating_add(CLOCK_STEP_MS);
        if jumped && now >= self.prior {
            return StepBack { origin: now, ahead: false, returned: true };
        }
        // A time no clock reads (past the year 2200: a host passing microseconds or nanoseconds once), back on one
        // that does, whenever the delivery comes: a plausible jump followed by a delivery before the time before it
        // is taken for real time (a quiet gap, then the clock corrected back past it), or a new alert repeated a
        // window after the old time was answered duplicate for as long as the gap. Keys are aged from the time
        // before the jump (or, with none, from now), and the step runs from that time, so a delivery back on that
        // clock undoes it (from the outlier's time, nothing ever came near enough to).
        let ahead = self.latest > LAST_PLAUSIBLE_MS && now <= LAST_PLAUSIBLE_MS;
        let origin = match ahead {
            true if self.prior <= LAST_PLAUSIBLE_MS => self.prior.max(now),
            true => now,
            false => self.latest.min(self.on_time.max(now)),
        };
        StepBack { origin, ahead, returned: false }
    }

    /// Deals with a clock gone back by more than [`CLOCK_STEP_MS`] before a delivery at `now` is answered.
    ///
    /// Every key and rate mark is moved back by the step, keeping the age it had at the latest entry
    /// ([`aged_back`]): a retry just after the step is still a duplicate, as it may be a resend, a key already old
    /// when the clock was corrected does not get a whole new window, and a key older than the step does not last the
    /// step longer on the new clock (nor does a rate mark answer 429 as long).
    ///
    /// One delivery's time out of line looks the same, and moved back for it, every recent key would expire as
    /// much early once the deliveries on time resume, and the alerts they key trade again. So the step stays
    /// pending, its keys marked: a later delivery back on the clock before it (no more than [`CLOCK_STEP_MS`]
    /// behind the step's start) undoes it, moving the marked keys, and those claimed meanwhile, forward by the
    /// step's size, and every rate mark with them (all are on the stepped clock); deliveries on the new clock keep
    /// it ([`Windows::turn`]). A step back while others are pending goes on top of them, from the latest one's
    /// clock: a delivery back on that clock undoes it alone, one back on the clock before them all undoes them all
    /// (the latest first), and one on a step's clock run on past it keeps that step and those below it. A step
    /// back while one from a time far ahead is pending takes its place: that one's clock is the one the deliveries
    /// since came on.
    fn rewind(&mut self, now: i64, limits: &Limits) {
        match self.turn(now, limits.dedup_window_ms) {
            Turn::Steady => {}
            Turn::Back => {
                let back = self.step_back(now);
                if back.returned {
                    // Nothing moves: should the jump have been real time (a pause, a quiet gap) and the delivery a
                    // stalled thread, a mark brought back to it expired at the next delivery on time. A mark left
                    // ahead only answers 429 for longer, and holds no other behind it ([`Windows::expire`]). The
                    // time before the jump stays the clock's (a stalled time taken for it made the next jump look
                    // like one too).
                    self.latest = now;
                    self.prior = now;
                    self.on_time = self.on_time.min(now);
                    return;
                }
                let mut oldest = i64::MAX;
                for p in self.seen.values_mut() {
                    *p = stepped_back(*p, back.origin, now);
                    oldest = oldest.min(seen_at(*p));
                }
                for (t, _) in self.rate.iter_mut() {
                    *t = aged_back(*t, back.origin, now);
                }
                if self.steps.last().is_some_and(|s| s.ahead) {
                    self.steps.pop();
                }
                if self.steps.len() == MAX_PENDING_STEPS {
                    self.steps.remove(0);
                }
                self.steps.push(Step { from: back.origin, to: now, counted: 0, ahead: back.ahead });
                self.latest = now;
                self.prior = now;
                self.on_time = now;
                self.sweep_at = self.sweep_at.min(oldest.saturating_add(limits.dedup_window_ms));
            }
            Turn::Settled { undone, kept } => {
                for _ in 0..undone {
                    let Some(step) = self.steps.pop() else { break };
                    let until = step.from.max(now);
                    for p in self.seen.values_mut() {
                        *p = stepped_forward(*p, step, until);
                    }
                    for (t, _) in self.rate.iter_mut() {
                        *t = mark_forward(*t, step, until);
                    }
                    // Keys only moved later: the sweep due stays early enough.
                    self.latest = self.latest.saturating_add(step.size()).min(until);
                    self.prior = self.latest;
                    self.on_time = self.on_time.saturating_add(step.size()).min(until);
                }
                if kept {
                    self.steps.clear();
                }
                if self.steps.is_empty() {
                    for p in self.seen.values_mut() {
                        *p &= !STEPPED;
                    }
                }
            }
        }
    }

    /// A time once the latest `undone` pending steps are undone, as [`Windows::rewind`] leaves it; `stepped`: on
    /// the stepped clock (a rate mark, or a key marked [`STEPPED`]).
    fn settled(&self, t: i64, stepped: bool, now: i64, undone: usize) -> i64 {
        match stepped {
            true => self.steps.iter().rev().take(undone).fold(t, |t, s| mark_forward(t, *s, s.from.max(now))),
            false => t,
        }
    }

    /// The time a key counts as seen at for a delivery at `now`, as [`Windows::rewind`] leaves it: what a claim
    /// is judged by, and what a peek answers from without rewinding.
    fn seen_for(&self, packed: i64, now: i64, window: i64) -> i64 {
        match self.turn(now, window) {
            Turn::Back => {
                let back = self.step_back(now);
                match back.returned {
                    true => seen_at(packed),
                    false => seen_at(stepped_back(packed, back.origin, now)),
                }
            }
            Turn::Settled { undone, .. } => self.settled(seen_at(packed), packed & STEPPED != 0, now, undone),
            Turn::Steady => seen_at(packed),
        }
    }

    /// A rate mark's time for a delivery at `now`, as [`Windows::rewind`] leaves it: what a peek counts by.
    fn mark_for(&self, t: i64, now: i64, window: i64) -> i64 {
        match self.turn(now, window) {
            Turn::Back => {
                let back = self.step_back(now);
                match back.returned {
                    true => t.min(now),
                    false => aged_back(t, back.origin, now),
                }
            }
            Turn::Settled { undone, .. } => self.settled(t, true, now, undone),
            Turn::Steady => t,
        }
    }

    /// Notes an entry made at `at` by a delivery or a key (not a restored rate mark: see [`Windows::on_time`]).
    fn made_at(&mut self, at: i64) {
        self.on_time = self.on_time.max(at);
        self.marked_at(at);
    }

    /// Notes an entry made at `at`.
    fn marked_at(&mut self, at: i64) {
        if at > self.latest {
            // The first entry has none before it (`latest` starts at 0): taken for a jump from 1970, a host passing 0
            // next looked like the clock back before a far jump.
            // Only a time a clock reads: after two outliers in a row, the second took the first for the time before
            // it, and a stall then aged keys from the stall itself.
            if self.latest == 0 {
                self.prior = at;
            } else if self.latest <= LAST_PLAUSIBLE_MS {
                self.prior = self.latest;
            }
            self.latest = at;
        } else if at < self.latest && (at > self.prior || self.prior == self.latest) && at <= LAST_PLAUSIBLE_MS {
            // The latest entry before `latest`, whatever order entries come in: restored newest first, a key ahead
            // was its own time before it, no jump, and the first delivery aged every restored key by the gap.
            self.prior = at;
        }
    }

    fn expire(&mut self, now: i64, limits: &Limits) {
        self.rewind(now, limits);
        let gone = gone_marks(self.rate.iter().map(|&(t, _)| t), now, limits.rate_window_ms);
        if gone.iter().any(|&g| g) {
            let mut i = 0;
            self.rate.retain(|_| {
                i += 1;
                !gone.get(i - 1).copied().unwrap_or(false)
            });
        }
        // Keys are swept against the latest time before this delivery's, if earlier: one time far ahead (a host
        // passing microseconds once) would otherwise delete every key, and its retry on the right clock trade
        // again. A key expired by `now` but not yet swept is still fresh to a claim, which reads the time.
        // At the latest entry's time (this delivery's own count, or the step just taken) nothing newer is due.
        if self.latest == now {
            return;
        }
        // Nor a key seen on a clock against a time no clock reads: after two such times in a row (a host passing
        // microseconds twice), the second swept every key against the first. Such a key is swept against the last
        // time a clock read; one seen past it (a host passing microseconds for good) against the horizon itself, or
        // the keys of such a host were never swept at all.
        let horizon = now.min(self.latest);
        let real = match horizon {
            h if h <= LAST_PLAUSIBLE_MS => Some(h),
            _ => Some(self.prior).filter(|&p| p <= LAST_PLAUSIBLE_MS),
        };
        if !self.seen.is_empty() && horizon >= self.sweep_at {
            let window = limits.dedup_window_ms;
            // The oldest key kept, found in the same pass.
            let mut oldest = horizon;
            self.seen.retain(|_, p| {
                let at = seen_at(*p);
                // A key seen past the last time a clock reads is taken as seen in microseconds: swept a thousand
                // windows after (a window of the host's real time). Swept a window after, a host on microseconds for
                // a few seconds lost those alerts' keys, and back on milliseconds, a resend traded again.
                let live = match at > LAST_PLAUSIBLE_MS {
                    true => horizon.saturating_sub(at) < window.saturating_mul(1_000),
                    false => real.map_or(true, |h| h.saturating_sub(at) < window),
                };
                if live {
                    oldest = oldest.min(seen_at(*p));
                }
                live
            });
            self.sweep_at = oldest.saturating_add(window);
            // Those keys last a thousand windows while the rate counts in the host's wrong units too (60 in 60 µs):
            // held to as many as a window holds at most, the oldest go first, so such a host's memory stays bounded.
            // (None is seen later than the latest entry, and the usual latest is a time a clock reads.)
            let far: Vec<i64> = match self.latest > LAST_PLAUSIBLE_MS {
                true => self.seen.values().map(|&p| seen_at(p)).filter(|&at| at > LAST_PLAUSIBLE_MS).collect(),
                false => Vec::new(),
            };
            if far.len() > FAR_KEYS_KEPT {
                let mut sorted = far;
                sorted.sort_unstable();
                let cut = sorted[sorted.len() - FAR_KEYS_KEPT];
                self.seen.retain(|_, p| seen_at(*p) <= LAST_PLAUSIBLE_MS || seen_at(*p) >= cut);
            }
        }
    }

    /// Whether a claim at `now` would find the key within its window (and then whether a duplicate of it was
    /// logged), without rewinding or sweeping.
    fn check(&self, key: &DedupKey, now: i64, limits: &Limits) -> Option<bool> {
        self.seen
            .get(&short(key))
            .filter(|p| now.saturating_sub(self.seen_for(**p, now, limits.dedup_window_ms)) < limits.dedup_window_ms)
            .map(|p| logged(*p))
    }

    /// Records a key first seen at `at`, keeping the next sweep due by its expiry.
    fn insert(&mut self, key: ShortKey, at: i64, window: i64) {
        let first = self.seen.is_empty();
        self.seen.insert(key, at << 2);
        self.sweep_by(at.saturating_add(window), first);
    }

    /// Keeps the next sweep due by `due` at the latest. `first`: the table held no key
    /// before this one, so no sweep was due.
    fn sweep_by(&mut self, due: i64, first: bool) {
        self.sweep_at = if first { due } else { self.sweep_at.min(due) };
    }

    /// Bytes this strategy's windows hold on the heap (for the memory budget).
    pub fn heap_bytes(&self) -> usize {
        // hashbrown keeps a power-of-two bucket count at most 7/8 full, one control
        // byte per bucket plus a group's worth of trailing control bytes.
        let cap = self.seen.capacity();
        let buckets = if cap == 0 { 0 } else { (cap * 8 / 7).next_power_of_two() };
        let entry = std::mem::size_of::<(ShortKey, i64)>();
        let table = if buckets == 0 { 0 } else { buckets * (entry + 1) + 16 };
        self.rate.capacity() * std::mem::size_of::<(i64, i64)>() + table
    }
}

impl MemoryStore {
    /// A store enforcing `limits`.
    pub fn new(limits: Limits) -> MemoryStore {
        MemoryStore {
            limits,
            spread: Keyed::default(),
            shards: (0..1 << SHARD_BITS).map(|_| Shard::default()).collect(),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The shard of a strategy, and its id's hash there.
    fn shard(&self, strategy: &str) -> (&Shard, u64) {
        let h = self.spread.hash_one(strategy);
        // The hash's top bits: the multiply-fold mixes every input bit into them.
        (&self.shards[(h >> (64 - SHARD_BITS)) as usize], h)
    }

    /// Runs `f` on a strategy's windows under its shard's lock, if it has any. Only a count, a claim or a restore
    /// makes them: a release, a peek or a size asked after `forget` (a strategy removed) left windows no one
    /// would free again.
    fn with_existing<R>(&self, strategy: &str, f: impl FnOnce(&mut Windows) -> R) -> Option<R> {
        let (shard, h) = self.shard(strategy);
        let mut map = shard.0.lock().unwrap_or_else(|e| e.into_inner());
        let list = map.get_mut(&h)?;
        list.iter_mut().find(|(id, _)| **id == *strategy).map(|(_, w)| f(w))
    }

    /// Answers from a strategy's windows, or from empty ones when it has none (making none).
    fn read_windows<R>(&self, strategy: &str, f: impl Fn(&Windows) -> R) -> R {
        self.with_existing(strategy, |w| f(w)).unwrap_or_else(|| f(&Windows::default()))
    }

    /// Runs `f` on a strategy's windows under its shard's lock, making them on first use.
    fn with_windows<R>(&self, strategy: &str, f: impl FnOnce(&mut Windows) -> R) -> R {
        let (shard, h) = self.shard(strategy);
        let mut map = shard.0.lock().unwrap_or_else(|e| e.into_inner());
        let list = map.entry(h).or_default();
        let i = match list.iter().position(|(id, _)| **id == *strategy) {
            Some(i) => i,
            None => {
                list.push((strategy.into(), Windows::default()));
                list.len() - 1
            }
        };
        f(&mut list[i].1)
    }

    /// Takes back one delivery counted at `at_ms` (the time `count` was given), when the host decides the same
    /// POST again: a copy answered `duplicate` while its first attempt's commit was failing is decided afresh
    /// once that attempt gave its key back, and one POST is one alert event, counted once. Returns whether a
    /// mark counted at that time was there to take back, wherever a clock step has moved it since.
    pub fn uncount(&self, strategy: &str, at_ms: i64) -> bool {
        let at = packable(at_ms);
        self.with_existing(strategy, |w| match w.rate.iter().rposition(|&(_, counted)| counted == at) {
            Some(i) => w.rate.remove(i).is_some(),
            None => false,
        })
        .unwrap_or(false)
    }

    /// Heap bytes held for one strategy's windows (0 when it has none).
    pub fn heap_bytes(&self, strategy: &str) -> usize {
        self.with_existing(strategy, |w| w.heap_bytes()).unwrap_or(0)
    }
}

impl MemoryStore {
    /// Puts back a dedup key claimed at `seen_at_ms` (for example from a host's database
    /// after a restart), so a redelivery within the window is still a duplicate.
    pub fn restore_key(&self, strategy: &str, key: &DedupKey, seen_at_ms: i64) {
        let window = self.limits.dedup_window_ms;
        let at = packable(seen_at_ms);
        self.with_windows(strategy, |w| {
            match w.seen.get(&short(key)).copied() {
                // The stored claim is as late or later: the restored one adds nothing.
                Some(p) if seen_at(p) >= at => return,
                // An entry still awaiting its sweep may be long expired: kept over the restored claim, the
                // redelivery it guards traded again. A duplicate logged in the stored window is of that window only.
                Some(p) => {
                    let log = if at.saturating_sub(seen_at(p)) < window { p & LOGGED } else { 0 };
                    w.seen.insert(short(key), at << 2 | log);
                    w.sweep_by(at.saturating_add(window), false);
                }
                None => w.insert(short(key), at, window),
            }
            w.made_at(at);
        });
    }

    /// Puts back a delivery counted at `at_ms` against the rate window (after a restart).
    /// Times may come in any order; only the latest `rate_limit` are kept.
    pub fn restore_rate(&self, strategy: &str, at_ms: i64) {
        let limit = self.limits.rate_limit as usize;
        self.with_windows(strategy, |w| {
            let at = packable(at_ms);
            // Marks expire from the front: one put back out of order behind a later one outlived its window.
            let i = w.rate.partition_point(|&(t, _)| t <= at);
            w.rate.insert(i, (at, at));
            // A window never holds more than the limit, and the oldest expire first: a host restoring a long
            // history grew the list without bound.
            if w.rate.len() > limit {
                w.rate.pop_front();
            }
            w.marked_at(at);
        });
    }
}

impl StateStore for MemoryStore {
    fn count(&self, strategy: &str, now: i64) -> bool {
        let limits = &self.limits;
        let now = packable(now);
        self.with_windows(strategy, |w| {
            w.expire(now, limits);
            if w.rate.len() >= limits.rate_limit as usize {
                return false;
            }
            w.rate.push_back((now, now));
            w.made_at(now);
            if let Some(step) = w.steps.last_mut() {
                step.counted = step.counted.saturating_add(1);
            }
            true
        })
    }

    fn claim(&self, strategy: &str, key: &DedupKey, now: i64) -> Claim {
        let limits = &self.limits;
        let now = packable(now);
        self.with_windows(strategy, |w| {
            w.expire(now, limits);
            let window = limits.dedup_window_ms;
            let due = now.saturating_add(window);
            // Claimed on a pending step's clock: undoing the step moves the key with the others.
            let stepped = if w.steps.is_empty() { 0 } else { STEPPED };
            // One lookup answers a duplicate, a new key, and a fresh key whose expired
            // entry awaits the next sweep (overwritten in place).
            let fresh = match w.seen.entry(short(key)) {
                Entry::Occupied(mut e) => {
                    let p = e.get_mut();
                    if now.saturating_sub(seen_at(*p)) < window {
                        let was_logged = logged(*p);
                        *p |= LOGGED;
                        return Claim::Duplicate { log: !was_logged };
                    }
                    *p = now << 2 | stepped;
                    false
                }
                Entry::Vacant(e) => {
                    e.insert(now << 2 | stepped);
                    true
                }
            };
            w.sweep_by(due, fresh && w.seen.len() == 1);
            w.made_at(now);
            Claim::Fresh
        })
    }

    fn release(&self, strategy: &str, key: &DedupKey) {
        self.with_existing(strategy, |w| w.seen.remove(&short(key)));
    }

    fn peek_count(&self, strategy: &str, now: i64) -> bool {
        let limits = &self.limits;
        let now = packable(now);
        self.read_windows(strategy, |w| {
            // A peek records nothing (a dry run at another time must leave the windows as they are): a clock gone
            // back, or a step undone, is answered as [`Windows::rewind`] would leave the marks, without doing it.
            // As `count` leaves them: the expired times at the front go (times a little out of order may leave an
            // expired one behind a live one, counted until it reaches the front, by both alike; a bisection
            // assumed them sorted and answered otherwise).
            // A mark left far ahead holds none behind it ([`gone_marks`]).
            let gone = gone_marks(
                w.rate.iter().map(|&(t, _)| w.mark_for(t, now, limits.dedup_window_ms)),
                now,
                limits.rate_window_ms,
            );
            w.rate.len() - gone.iter().filter(|&&g| g).count() < limits.rate_limit as usize
        })
    }

    fn peek_claim(&self, strategy: &str, key: &DedupKey, now: i64) -> Claim {
        let now = packable(now);
        // A clock gone back, or a step undone, is read as [`Windows::rewind`] would leave the key.
        self.read_windows(strategy, |w| match w.check(key, now, &self.limits) {
            Some(logged) => Claim::Duplicate { log: !logged },
            None => Claim::Fresh,
        })
    }

    fn forget(&self, strategy: &str) {
        let (shard, h) = self.shard(strategy);
        let mut map = shard.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = map.get_mut(&h) {
            list.retain(|(id, _)| **id != *strategy);
            if list.is_empty() {
                map.remove(&h);
            }
        }
    }
}

/// Answers a host worked out for one delivery in its own transaction (for example a
/// shared database: the rate count and the dedup claim made beside the outbox rows), for
/// [`Engine::deliver_settled`](crate::Engine::deliver_settled). It records which of them
/// the engine asked for, so the host keeps exactly what the engine kept: a rate mark only
/// if the delivery was counted, a dedup key only if it was claimed and not given back.
#[derive(Debug)]
pub struct Settled {
    within_rate: bool,
    claim: Claim,
    counted: AtomicBool,
    claimed: AtomicBool,
    released: AtomicBool,
}

impl Settled {
    /// What the host's store says: whether one more delivery fits the rate window, and
    /// what the dedup key is (`Fresh` when the host has just claimed it).
    pub fn new(within_rate: bool, claim: Claim) -> Settled {
        Settled {
            within_rate,
            claim,
            counted: AtomicBool::new(false),
            claimed: AtomicBool::new(false),
            released: AtomicBool::new(false),
        }
    }

    /// Whether the engine counted the delivery against the rate window (it reached the
    /// rate step and the window had room): the host records a rate mark.
    pub fn counted(&self) -> bool {
        self.counted.load(Ordering::Relaxed)
    }

    /// Whether the host keeps its fresh claim of the dedup key: the engine claimed it and
    /// did not give it back (an error outcome gives it back, so the retry trades once).
    pub fn keeps_claim(&self) -> bool {
        self.claim == Claim::Fresh && self.claimed.load(Ordering::Relaxed) && !self.released.load(Ordering::Relaxed)
    }
}

impl StateStore for Settled {
    fn count(&self, _strategy: &str, _now: i64) -> bool {
        if self.within_rate {
            self.counted.store(true, Ordering::Relaxed);
        }
        self.within_rate
    }

    fn claim(&self, _strategy: &str, _key: &DedupKey, _now: i64) -> Claim {
        self.claimed.store(true, Ordering::Relaxed);
        self.claim
    }

    fn release(&self, _strategy: &str, _key: &DedupKey) {
        self.released.store(true, Ordering::Relaxed);
    }

    fn peek_count(&self, _strategy: &str, _now: i64) -> bool {
        self.within_rate
    }

    fn peek_claim(&self, _strategy: &str, _key: &DedupKey, _now: i64) -> Claim {
        self.claim
    }

    fn forget(&self, _strategy: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// `peek_count` answers what `count` would, at any time, whatever deliveries came before: against a
        /// plain list of the counted times.
        #[test]
        fn peek_count_agrees_with_count_and_a_plain_list(steps in proptest::collection::vec((0i64..3_000, any::<bool>()), 1..200)) {
            let limits = Limits { rate_limit: 5, rate_window_ms: 10_000, dedup_window_ms: 30_000 };
            let store = MemoryStore::new(limits);
            let mut now = 0;
            let mut counted: Vec<i64> = Vec::new();
            for (step, record) in steps {
                now += step;
                let live = counted.iter().filter(|&&t| now - t < limits.rate_window_ms).count();
                let room = live < limits.rate_limit as usize;
                prop_assert_eq!(store.peek_count("s", now), room);
                if record {
                    prop_assert_eq!(store.count("s", now), room);
                    if room {
                        counted.push(now);
                    }
                }
            }
        }
    }

    proptest! {
        /// `claim` and `peek_claim` answer as a plain list of claimed keys would, whatever the order of claims,
        /// releases and times: a key not yet swept (`peek_claim` never sweeps) is never taken for a duplicate.
        #[test]
        fn claims_agree_with_a_plain_list(steps in proptest::collection::vec((0i64..9_000, 0u8..6, 0u8..4), 1..300)) {
            let limits = Limits { rate_limit: 1_000, rate_window_ms: 10_000, dedup_window_ms: 30_000 };
            let store = MemoryStore::new(limits);
            let mut now = 0;
            // key → (first seen, duplicate logged)
            let mut model: HashMap<u8, (i64, bool)> = HashMap::new();
            for (step, k, op) in steps {
                now += step;
                let key = [k; 32];
                let live = model.get(&k).copied().filter(|(t, _)| now - t < limits.dedup_window_ms);
                let want = match live {
                    Some((_, logged)) => Claim::Duplicate { log: !logged },
                    None => Claim::Fresh,
                };
                prop_assert_eq!(store.peek_claim("s", &key, now), want);
                match op {
                    0 => {
                        store.release("s", &key);
                        model.remove(&k);
                    }
                    _ => {
                        prop_assert_eq!(store.claim("s", &key, now), want);
                        match live {
                            Some((t, _)) => model.insert(k, (t, true)),
                            None => model.insert(k, (now, false)),
                        };
                    }
                }
            }
        }
    }

    /// The windows as plain lists, for the clock-step proptest: every key and rate mark with its time, moved as
    /// [`Windows::rewind`] documents, and swept against the latest time before each delivery's.
    struct Plain {
        limits: Limits,
        latest: i64,
        /// The latest before `latest` was last raised.
        prior: i64,
        /// (from, to, deliveries counted since, from a time far ahead) of each pending step, the latest last.
        steps: Vec<(i64, i64, u32, bool)>,
        counted: Vec<i64>,
        /// key → (first seen, on the pending step's clock, duplicate logged)
        keys: HashMap<u8, (i64, bool, bool)>,
    }

    impl Plain {
        fn expire(&mut self, now: i64) {
            if now < self.latest - CLOCK_STEP_MS
                && self.latest <= LAST_PLAUSIBLE_MS
                && self.latest > self.prior + CLOCK_STEP_MS
                && now >= self.prior
            {
                // Back from one time ahead: no key or mark moves, no step; the time before the jump stays.
                self.latest = now;
                self.prior = now;
            } else if now < self.latest - CLOCK_STEP_MS {
                // A step while others are pending goes on top of them, from the latest one's clock (one from a time
                // far ahead is replaced). Back from a time no clock reads, ages are measured from the time before it.
                let ahead = self.latest > LAST_PLAUSIBLE_MS && now <= LAST_PLAUSIBLE_MS;
                let origin = match ahead {
                    true if self.prior <= LAST_PLAUSIBLE_MS => self.prior.max(now),
                    true => now,
                    false => self.latest,
                };
                if self.steps.last().is_some_and(|s| s.3) {
                    self.steps.pop();
                }
                if self.steps.len() == MAX_PENDING_STEPS {
                    self.steps.remove(0);
                }
                self.steps.push((origin, now, 0, ahead));
                self.latest = now;
                self.prior = now;
                // Every key and mark keeps its age, however old.
                for t in &mut self.counted {
                    *t = now - (origin - *t).max(0);
                }
                for (t, stepped, _) in self.keys.values_mut() {
                    *stepped = true;
                    *t = now - (origin - *t).max(0);
                }
            } else {
                // From the latest step down: undone while the time is back on the clock before it, all kept once
                // one's clock has run on past it.
                while let Some(&(from, to, counted, ahead)) = self.steps.last() {
                    if counted >= STEP_KEPT_AFTER && now > to + CLOCK_STEP_MS
                        || ahead && now >= from + self.limits.dedup_window_ms
                    {
                        self.steps.clear();
                        break;
                    }
                    if now < from - CLOCK_STEP_MS {
                        break;
                    }
                    self.steps.pop();
                    let until = from.max(now);
                    for (t, stepped, _) in self.keys.values_mut() {
                        if *stepped {
                            *t = (*t + (from - to)).min(until);
                        }
                    }
                    for t in &mut self.counted {
                        *t = (*t + (from - to)).min(until);
                    }
                    self.latest = (self.latest + (from - to)).min(until);
                    self.prior = self.latest;
                }
                if self.steps.is_empty() {
                    for (_, stepped, _) in self.keys.values_mut() {
                        *stepped = false;
                    }
                }
            }
            // Expired marks go from the front; a live one holds those behind it, unless far ahead of now.
            let mut i = 0;
            while i < self.counted.len() {
                let t = self.counted[i];
                if now - t >= self.limits.rate_window_ms {
                    self.counted.remove(i);
                } else if t > now + CLOCK_STEP_MS {
                    i += 1;
                } else {
                    break;
                }
            }
            if self.latest != now {
                let horizon = now.min(self.latest);
                let real = match horizon {
                    h if h <= LAST_PLAUSIBLE_MS => Some(h),
                    _ => Some(self.prior).filter(|&p| p <= LAST_PLAUSIBLE_MS),
                };
                let window = self.limits.dedup_window_ms;
                self.keys.retain(|_, (t, _, _)| match *t > LAST_PLAUSIBLE_MS {
                    true => horizon - *t < window * 1_000,
                    false => real.map_or(true, |h| h - *t < window),
                });
            }
        }

        fn raise(&mut self, now: i64) {
            if now > self.latest {
                if self.latest == 0 {
                    self.prior = now;
                } else if self.latest <= LAST_PLAUSIBLE_MS {
                    self.prior = self.latest;
                }
                self.latest = now;
            } else if now < self.latest && (now > self.prior || self.prior == self.latest) && now <= LAST_PLAUSIBLE_MS {
                self.prior = now;
            }
        }

        fn count(&mut self, now: i64) -> bool {
            self.expire(now);
            let room = self.counted.len() < self.limits.rate_limit as usize;
            if room {
                self.counted.push(now);
                self.raise(now);
                if let Some((_, _, counted, _)) = self.steps.last_mut() {
                    *counted += 1;
                }
            }
            room
        }

        fn claim(&mut self, k: u8, now: i64) -> Claim {
            self.expire(now);
            let stepped = !self.steps.is_empty();
            match self.keys.get_mut(&k) {
                Some((t, _, logged)) if now - *t < self.limits.dedup_window_ms => {
                    let log = !*logged;
                    *logged = true;
                    Claim::Duplicate { log }
                }
                _ => {
                    self.keys.insert(k, (now, stepped, false));
                    self.raise(now);
                    Claim::Fresh
                }
            }
        }
    }

    proptest! {
        /// With the clock stepping back now and then by more than [`CLOCK_STEP_MS`], and single deliveries at a
        /// time far out of line (behind, or far ahead) among the others, `count` and `claim` answer as plain lists
        /// moved as [`Windows::rewind`] documents (every key and rate mark moved back keeps its age; a step a later time comes back
        /// from is undone, unless it came back from a time far ahead), and `peek_count` and `peek_claim`, asked first, answer the same without rewinding.
        #[test]
        fn a_clock_stepping_back_keeps_each_keys_age(
            steps in proptest::collection::vec(
                (
                    prop_oneof![0i64..9_000, 0i64..9_000, -90_000i64..-30_001],
                    // Far ahead past the latest time a clock reads too (a host passing microseconds), where the
                    // outlier rule applies.
                    prop_oneof![
                        Just(0i64),
                        Just(0i64),
                        -400_000i64..-30_001,
                        30_001i64..10_000_000_000,
                        LAST_PLAUSIBLE_MS..1_000_000_000_000_000
                    ],
                    0u8..4,
                ),
                1..300,
            )
        ) {
            let limits = Limits { rate_limit: 5, rate_window_ms: 10_000, dedup_window_ms: 30_000 };
            let store = MemoryStore::new(limits);
            let mut plain = Plain { limits, latest: 0, prior: 0, steps: Vec::new(), counted: Vec::new(), keys: HashMap::new() };
            let mut clock = 100_000;
            for (step, out_of_line, k) in steps {
                clock += step;
                // A single delivery's time out of line leaves the clock where it was for the next.
                let now = clock + out_of_line;
                let key = [k; 32];
                let peek_room = store.peek_count("s", now);
                let peek_claim = store.peek_claim("s", &key, now);
                let room = plain.count(now);
                prop_assert_eq!(peek_room, room);
                prop_assert_eq!(store.count("s", now), room);
                let claim = plain.claim(k, now);
                prop_assert_eq!(peek_claim, claim);
                prop_assert_eq!(store.claim("s", &key, now), claim);
            }
        }
    }

    /// Strategies that share a shard keep windows of their own, and forgetting one leaves its neighbours'.
    #[test]
    fn strategies_sharing_a_shard_keep_their_own_windows() {
        let store = MemoryStore::new(Limits { rate_limit: 1, rate_window_ms: 60_000, dedup_window_ms: 300_000 });
        // 500 ids over 64 shards: every shard holds several, ids of every length up to 24 bytes.
        let ids: Vec<String> = (0..500).map(|i| format!("{i}{}", "s".repeat(i % 22))).collect();
        for id in &ids {
            assert!(store.count(id, 0), "{id}: a window of its own");
            assert_eq!(store.claim(id, &[7; 32], 0), Claim::Fresh, "{id}");
        }
        for id in &ids {
            assert!(!store.count(id, 1), "{id}: its one delivery a minute is taken");
            assert_eq!(store.peek_claim(id, &[7; 32], 1), Claim::Duplicate { log: true }, "{id}");
        }
        store.forget(&ids[0]);
        assert!(store.count(&ids[0], 2), "forgotten: a fresh window");
        assert!(ids[1..].iter().all(|id| !store.count(id, 2)), "the others keep theirs");
    }

    /// 2024-01-19 15:00 UTC.
    const T0_MS: i64 = 1_705_676_400_000;

    /// A key restored over its own expired entry, not yet swept, was dropped (the store only asked whether it held
    /// the key): the redelivery within the restored claim's window traded a second time.
    #[test]
    fn restoring_a_key_over_its_expired_entry_keeps_the_restored_claim() {
        let store = MemoryStore::new(Limits::default());
        let key = [7u8; 32];
        assert_eq!(store.claim("s1", &key, T0_MS), Claim::Fresh);
        // 400 s later a peer's (or the host database's) claim of the same key 10 s ago is put back.
        store.restore_key("s1", &key, T0_MS + 390_000);
        assert_eq!(store.claim("s1", &key, T0_MS + 400_000), Claim::Duplicate { log: true }, "claimed 10 s ago");
    }

    const SEC: i64 = 1_000;

    /// The reference server at start: dedup keys stored ahead of its clock are brought back to it
    /// (`windows::rewind_keys`), rate marks are not. A mark restored from a run whose clock was ahead is then the
    /// latest entry, and the first delivery's step back ages every key from it: a key claimed 10 s before the restart is
    /// taken as 610 s old and its resend trades a second time. Before 3962dff only keys seen later than `now` moved.
    #[test]
    fn a_rate_mark_restored_ahead_does_not_expire_the_restored_keys() {
        let store = MemoryStore::default();
        let key = [1u8; 32];
        let now = T0_MS;
        // Claimed 10 s ago (brought back to `now` or not: here it is already behind it).
        store.restore_key("s", &key, now - 10 * SEC);
        // A mark the previous run stamped with its clock 10 min ahead.
        store.restore_rate("s", now + 600 * SEC);
        assert!(store.count("s", now + SEC));
        assert_eq!(
            store.claim("s", &key, now + SEC),
            Claim::Duplicate { log: true },
            "claimed 11 s ago: the resend must not trade again"
        );
    }

    /// As above with a minute of marks restored ahead (none the latest alone): the step was measured from the
    /// latest mark, no delivery on this clock, and every restored key aged by the gap.
    #[test]
    fn rate_marks_restored_ahead_do_not_age_the_restored_keys() {
        let store = MemoryStore::default();
        let key = [1u8; 32];
        store.restore_key("s", &key, T0_MS - 10 * SEC);
        for i in 0..30 {
            store.restore_rate("s", T0_MS + 540 * SEC + i * 2 * SEC);
        }
        assert!(store.count("s", T0_MS + SEC));
        assert_eq!(store.claim("s", &key, T0_MS + SEC), Claim::Duplicate { log: true }, "claimed 11 s ago");
        assert!(store.count("s", T0_MS + 61 * SEC), "the restored marks count from the step, a minute ago");
    }

    /// The reference server takes back the rate mark of a copy answered `duplicate` that it decides again
    /// (`webhook.rs` `uncount(app, &outcome, now)`), by the time it was counted at. Since 3962dff a step back (and an
    /// undo) moves every mark, so the mark is no longer found and the one POST stays counted twice; before, the mark
    /// was left where it was. Here the limit is 2: the copy, a delivery on the corrected clock, and then the copy decided
    /// again should fit.
    #[test]
    fn uncount_finds_a_mark_moved_by_a_step() {
        let limits = Limits { rate_limit: 2, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
        let store = MemoryStore::new(limits);
        // The copy, counted at T0_MS (then left waiting for its first attempt's commit).
        assert!(store.count("s", T0_MS));
        // The clock corrected back by 100 s meanwhile: another delivery.
        assert!(store.count("s", T0_MS - 100 * SEC));
        // The first attempt's commit failed: the copy's count is taken back, and it is decided again.
        let _ = store.uncount("s", T0_MS);
        assert!(store.count("s", T0_MS - 99 * SEC), "one POST is counted once");
    }

    /// As above, through an undone step: a copy counted on a pending step's clock has its mark moved forward by the
    /// undo.
    #[test]
    fn uncount_finds_a_mark_moved_by_an_undone_step() {
        let limits = Limits { rate_limit: 3, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
        let store = MemoryStore::new(limits);
        assert!(store.count("s", T0_MS));
        // A stalled thread 40 s behind: a pending step. The copy is counted on its clock.
        assert!(store.count("s", T0_MS - 40 * SEC));
        // Back on time: the step undone, every mark moved forward by 40 s.
        assert!(store.count("s", T0_MS + SEC));
        let _ = store.uncount("s", T0_MS - 40 * SEC);
        assert!(store.count("s", T0_MS + 2 * SEC), "three POSTs counted, one taken back: room for one more");
    }

    /// Marks put back in any order, and more than a window holds: the latest `rate_limit` are kept, in order.
    #[test]
    fn restored_rate_marks_are_bounded_and_ordered() {
        let store = MemoryStore::new(Limits { rate_limit: 3, rate_window_ms: 60_000, dedup_window_ms: 300_000 });
        for at in [5_000, 1_000, 4_000, 2_000, 3_000] {
            store.restore_rate("s", at);
        }
        store.with_windows("s", |w| assert_eq!(w.rate, [(3_000, 3_000), (4_000, 4_000), (5_000, 5_000)]));
        assert!(!store.peek_count("s", 62_999), "three marks live");
        assert!(store.peek_count("s", 63_000), "the oldest kept has expired");
    }

    /// Asking after a strategy's windows (a release, a peek, an uncount, their size) makes none: asked after a
    /// removal's forget, they were never freed.
    #[test]
    fn asking_after_windows_makes_none() {
        let store = MemoryStore::default();
        let held = |store: &MemoryStore| {
            let (shard, h) = store.shard("s1");
            let map = shard.0.lock().unwrap();
            map.get(&h).is_some_and(|list| list.iter().any(|(id, _)| &**id == "s1"))
        };
        assert_eq!(store.claim("s1", &[1; 32], 0), Claim::Fresh);
        assert!(held(&store) && store.heap_bytes("s1") > 0);
        store.forget("s1");
        store.release("s1", &[1; 32]);
        assert!(store.peek_count("s1", 0));
        assert_eq!(store.peek_claim("s1", &[1; 32], 0), Claim::Fresh);
        assert!(!store.uncount("s1", 0));
        assert_eq!(store.heap_bytes("s1"), 0);
        assert!(!held(&store), "no windows made");
    }

    #[test]
    fn settled_answers_are_what_the_host_said() {
        let fresh = Settled::new(true, Claim::Fresh);
        assert!(fresh.count("s", 0) && fresh.peek_count("s", 0));
        assert_eq!(fresh.claim("s", &[0; 32], 0), Claim::Fresh);
        assert!(fresh.counted() && fresh.keeps_claim());
        fresh.release("s", &[0; 32]);
        assert!(!fresh.keeps_claim(), "given back");
        let full = Settled::new(false, Claim::Duplicate { log: true });
        assert!(!full.count("s", 0) && !full.counted());
        assert_eq!(full.peek_claim("s", &[0; 32], 0), Claim::Duplicate { log: true });
        assert!(!full.keeps_claim());
    }
}
