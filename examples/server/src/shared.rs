//! The webhook when several servers share one PostgreSQL. Alerts are decided and stored in batches, each one
//! transaction there (group commit): under their strategies' locks it counts the rate windows (exact across
//! servers), claims the dedup keys (a unique-key insert), reads the bots' states other servers wrote, has the
//! engine decide each alert with those answers ([`Engine::deliver_settled`]), and stores the log and outbox
//! rows, all in one commit. A race between servers therefore trades once; a crash never separates a claim from
//! its stored orders; and when PostgreSQL cannot be reached the batch's alerts are answered 500 with the cause
//! and nothing of them is kept, so each sender's retry trades once.
//!
//! A batch waits for its strategies' locks only briefly ([`batch::LOCK_BRIEF_MS`]): the alerts of a strategy
//! whose lock another server holds longer (its commit waiting for a synchronous standby, or the server frozen)
//! go to a lane of their own, which waits for that lock in PostgreSQL while the batch and the server's next
//! ones go on with the other strategies ([`Lanes`]).
//!
//! [`Engine::deliver_settled`]: strategy_webhook::Engine::deliver_settled

use crate::app::{now_ms, App};
use crate::cpu::Here;
use crate::error::ApiError;
use crate::http::{json, Answer};
use crate::store::pg::batch::{self, Decided};
use crate::store::{LogEntry, StoreError};
use crate::webhook::Shield;
use bytes::Bytes;
use std::collections::{hash_map, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use strategy_webhook::engine::{dedup_key, hex_key};
use strategy_webhook::outcome::Outcome;
use strategy_webhook::state::{Claim, Settled};
use strategy_webhook::{Decision, TokenHash};
use tokio::sync::{mpsc, oneshot, Mutex, Semaphore};

/// Most alerts in one transaction.
const BATCH: usize = 128;
/// Alerts waiting for a batch before senders wait.
const QUEUE: usize = 16 * 1024;
/// Transactions a server runs at once: one can be opening while another commits.
const COMMITTERS: usize = 1;
/// A batch that follows one of at least this many alerts (the server is under load) waits up to [`GATHER`] for
/// more before it starts. A transaction costs PostgreSQL about as much for its statements, locks and commit as
/// two dozen alerts' rows do, so under load twice the alerts per batch costs each alert about a quarter less
/// CPU. The wait follows the last batch's size, not how many were queued when this one starts: under a steady
/// load a batch that waited takes in everything that was on its way, so the next one finds few queued, and a
/// queue-based rule would wait before every other batch only. Under a light load no batch waits, and none adds
/// latency: 2,000 alerts a second make batches of about 4, and would make about 7 if they waited.
///
/// A server with fewer open connections than twice this (one of several behind a load balancer) can never batch
/// that many: its threshold is half its open connections, down to [`GATHER_SIBLINGS_MIN`]. Half, because under
/// a steady full load about half a server's senders are on their way (reading, writing, deciding) while the
/// other half wait in the batch.
const GATHER_SIBLINGS: usize = 16;
/// The least threshold: a server with only a few connections open (a quiet one, or senders that connect for
/// each alert at a low rate) never waits.
const GATHER_SIBLINGS_MIN: usize = 8;
/// How long a batch under load waits for more alerts.
const GATHER: std::time::Duration = std::time::Duration::from_millis(1);

/// Where the webhook hands its alerts to the batches.
pub struct Committer {
    tx: mpsc::Sender<Job>,
    /// The alerts (strategy, dedup key) of batches whose commit was not confirmed, until when (Unix ms, the dedup
    /// window) they may still land: a retry of one that fails meanwhile (its strategy still locked by that
    /// commit, waiting for a standby) is answered as maybe stored too, never "nothing was sent", which a trader
    /// would take for leave to enter by hand, doubling the order once the first commit lands.
    unconfirmed: std::sync::Mutex<HashMap<(String, String), i64>>,
}

impl Committer {
    fn unconfirmed(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), i64>> {
        self.unconfirmed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes `jobs` as maybe stored, until `until_ms`.
    fn note_unconfirmed(&self, jobs: &[Job], until_ms: i64) {
        let mut u = self.unconfirmed();
        let now = now_ms();
        u.retain(|_, until| *until > now);
        for j in jobs {
            u.insert((j.strategy.clone(), j.key.clone()), until_ms);
        }
    }

    /// Whether an earlier attempt of this alert may still land.
    fn maybe_stored(&self, strategy: &str, key: &str) -> bool {
        self.unconfirmed().get(&(strategy.to_owned(), key.to_owned())).is_some_and(|until| *until > now_ms())
    }

    /// Forgets an alert whose fate a later attempt settled (processed: the first had not landed; a duplicate: it
    /// had).
    fn settled(&self, strategy: &str, key: &str) {
        let mut u = self.unconfirmed();
        // Empty but for a commit that went unanswered: the usual answer costs no key.
        if !u.is_empty() {
            u.remove(&(strategy.to_owned(), key.to_owned()));
        }
    }
}

/// One alert waiting for its batch.
struct Job {
    strategy: String,
    token: String,
    body: Bytes,
    content_type: Option<String>,
    /// The dedup key, hex.
    key: String,
    done: oneshot::Sender<Result<(u16, std::borrow::Cow<'static, str>), Failed>>,
    /// When it was queued, for `swh_store_queue_seconds`.
    queued: std::time::Instant,
    /// When it was received (Unix ms): its orders' deadlines run from here, not from the batch that decides
    /// it, which may come seconds later (behind a batch waiting on PostgreSQL).
    received_ms: i64,
    /// The request's slot in the in-flight cap, held until the batch has decided the job whether or not the
    /// sender waits for it: queued jobs (each with its body) stay within the cap. Taken once decided: the slot
    /// counts requests being read or decided, and held through the commit, a burst of alerts from one address
    /// met the per-address cap and was refused 503 (the bodies left are a few batches' worth).
    in_flight: std::sync::Mutex<Option<Arc<crate::budget::Permit>>>,
}

/// Why an alert was not answered by the engine.
#[derive(Clone)]
enum Failed {
    /// The shared database failed: nothing of the batch is stored.
    Store(StoreError),
    /// The batch's commit was not confirmed: it may be stored (and its orders sent).
    Unconfirmed(StoreError),
    /// The batch waited too long for a lock another transaction holds: nothing of it is stored, but that
    /// transaction may be another server's attempt of the same alert, still committing.
    Locked(StoreError),
    /// The decision pool has stopped (shutting down).
    Busy,
}

impl From<StoreError> for Failed {
    fn from(e: StoreError) -> Failed {
        Failed::Store(e)
    }
}

/// One of [`LogEntry`]'s constructors of an alert's ERROR row when nothing of it was stored.
type NotStoredRow = fn(&str, Option<String>, &dyn std::fmt::Display, i64) -> LogEntry;

impl Failed {
    /// The Logs' ERROR row an alert answered with this failure gets, and its cause. None for a commit that may
    /// have landed (its own rows come with it) or a stop. A lock wait's row says what its answer does: the
    /// holder may be another attempt of the alert, still committing, so it is not to be placed by hand.
    fn not_stored_row(&self) -> Option<(&StoreError, NotStoredRow)> {
        match self {
            Failed::Store(e) => Some((e, LogEntry::not_stored_attempt)),
            Failed::Locked(e) => Some((e, LogEntry::not_stored_locked)),
            Failed::Unconfirmed(_) | Failed::Busy => None,
        }
    }

    /// A failure of a batch's opening (its locks, counts and claims): a lock wait given up is told apart from an
    /// unreachable database, whose answer says nothing was sent.
    fn opening(e: StoreError) -> Failed {
        if e.lock_not_available() {
            Failed::Locked(e)
        } else {
            Failed::Store(e)
        }
    }
}

/// The strategies whose lock a batch found held by another transaction past its brief wait, each with its alerts
/// waiting for that lock in the order they came. Waited for in the commit loop, one strategy's held lock stalled
/// every other strategy's alerts on this server for the whole lock wait, and failed those in the same batch: a
/// lane of the strategy's own waits for it instead (in PostgreSQL, so that the lock is granted the moment its
/// holder ends, ahead of newer attempts), while the commit loop's batches go on with the other strategies. A
/// strategy's alerts that come while it has a lane queue behind the ones in it, so they are decided in the order
/// they came (an open and its close sent milliseconds apart); once the lane is empty it closes, and the
/// strategy's next alerts go to the commit loop's batches again.
struct Lanes {
    waiting: std::sync::Mutex<HashMap<String, VecDeque<Job>>>,
    /// The lanes' connections to the shared database at once: half the pool. Each lane holds one for as long as
    /// its lock wait (up to [`batch::LOCK_WAIT_MS`]); unbounded, a lane for each strategy a frozen server held (a
    /// bar close's batch names dozens) would take every connection, and the other strategies' batches would wait
    /// for one until they failed.
    connections: Semaphore,
}

impl Lanes {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Job>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues the alerts of strategies with a lane behind the ones there; returns the others, in order.
    fn queue(&self, jobs: Vec<Job>) -> Vec<Job> {
        let mut waiting = self.waiting();
        if waiting.is_empty() {
            return jobs;
        }
        jobs.into_iter()
            .filter_map(|j| match waiting.get_mut(&j.strategy) {
                Some(q) => {
                    q.push_back(j);
                    None
                }
                None => Some(j),
            })
            .collect()
    }

    /// Puts `held` (alerts a batch left out, their strategy's lock held elsewhere) in their strategies' lanes, in
    /// order, and starts the lanes that were not running.
    fn open(self: &Arc<Self>, app: &Arc<App>, shield: &Arc<Shield>, held: Vec<Job>) {
        let mut waiting = self.waiting();
        for j in held {
            match waiting.entry(j.strategy.clone()) {
                hash_map::Entry::Occupied(mut q) => q.get_mut().push_back(j),
                hash_map::Entry::Vacant(v) => {
                    let strategy = v.key().clone();
                    v.insert(VecDeque::from([j]));
                    let (app, shield, lanes) = (Arc::clone(app), Arc::clone(shield), Arc::clone(self));
                    tokio::spawn(async move { lane(app, shield, lanes, strategy).await });
                }
            }
        }
    }

    /// The next batch of `strategy`'s lane: its first alerts, each key once (a repeat waits for the next batch,
    /// as in the commit loop). None once the lane is empty, which closes it: taken under the same lock as
    /// [`Lanes::queue`], so no alert is queued to a lane that has closed.
    fn next(&self, strategy: &str) -> Vec<Job> {
        let mut waiting = self.waiting();
        let Some(q) = waiting.get_mut(strategy) else { return Vec::new() };
        let mut keys = HashSet::new();
        let (mut batch, mut repeats) = (Vec::new(), Vec::new());
        while batch.len() < BATCH {
            let Some(j) = q.pop_front() else { break };
            if keys.insert(j.key.clone()) {
                batch.push(j);
            } else {
                repeats.push(j);
            }
        }
        for j in repeats.into_iter().rev() {
            q.push_front(j);
        }
        if batch.is_empty() {
            waiting.remove(strategy);
        }
        batch
    }
}

/// Decides `strategy`'s alerts that wait for its lock, a batch at a time, each waiting for the lock in
/// PostgreSQL up to [`batch::LOCK_WAIT_MS`] (answered `store_locked` past it, as documented), until none is left.
async fn lane(app: Arc<App>, shield: Arc<Shield>, lanes: Arc<Lanes>, strategy: String) {
    loop {
        let mut jobs = lanes.next(&strategy);
        if jobs.is_empty() {
            return;
        }
        // The lock wait counts from here, a wait for a connection included: the alerts are answered within
        // about that wait, whatever else is locked.
        let until = tokio::time::Instant::now() + std::time::Duration::from_millis(batch::LOCK_WAIT_MS);
        // Never closed.
        let connection = lanes.connections.acquire().await.ok();
        let left = until.saturating_duration_since(tokio::time::Instant::now()).as_millis();
        let wait = batch::Lock::Wait(u64::try_from(left).unwrap_or(batch::LOCK_WAIT_MS));
        let mut held = Vec::new();
        let answers = settle(&app, &shield, &mut jobs, wait, &mut held).await;
        drop(connection);
        answer(&app, &shield, jobs, answers);
    }
}

impl Committer {
    /// Starts the batches' tasks.
    pub fn start(app: &Arc<App>, shield: &Arc<Shield>) -> Committer {
        let (tx, rx) = mpsc::channel(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let pool = app.shared.as_ref().map_or(2, |pg| pg.max_size());
        let lanes = Arc::new(Lanes {
            waiting: std::sync::Mutex::new(HashMap::new()),
            connections: Semaphore::new((pool / 2).max(1)),
        });
        for _ in 0..COMMITTERS {
            let (app, shield, rx, lanes) = (Arc::clone(app), Arc::clone(shield), Arc::clone(&rx), Arc::clone(&lanes));
            tokio::spawn(async move { commit_loop(app, shield, rx, lanes).await });
        }
        Committer { tx, unconfirmed: std::sync::Mutex::new(HashMap::new()) }
    }
}

/// Decides and stores one alert on the shared database, and answers it.
pub async fn webhook(
    app: &Arc<App>,
    shield: &Arc<Shield>,
    token: &str,
    body: Bytes,
    content_type: Option<String>,
    id: String,
    in_flight: Arc<crate::budget::Permit>,
) -> (Answer, Option<String>) {
    // The key before the batch: a hostile body costs its parse here, not while the strategies are locked. A
    // short body's parse is cheap and bounded, so it runs right here when its strategy is idle (two thread
    // switches spared); a longer one on the decision pool.
    let key = {
        let (body, ct) = (body.clone(), content_type.clone());
        let short = body.len() <= crate::webhook::DECIDE_HERE_MAX;
        let job = move || hex_key(&dedup_key(&body, &strategy_webhook::parse(&body, ct.as_deref())));
        shield.cpu.run_short_here(&id, short, job).await
    };
    let Ok(key) = key else { return (ApiError::Busy.answer(), Some(id)) };
    let committer = app.committer.get_or_init(|| Committer::start(app, shield));
    let (done, answer) = oneshot::channel();
    let job = Job {
        strategy: id.clone(),
        token: token.to_owned(),
        body,
        content_type,
        key: key.to_string(),
        done,
        queued: std::time::Instant::now(),
        received_ms: now_ms(),
        in_flight: std::sync::Mutex::new(Some(in_flight)),
    };
    // The batch answers whatever becomes of this handler (a sender that hangs up).
    if committer.tx.send(job).await.is_err() {
        return (ApiError::Busy.answer(), Some(id));
    }
    let key = key.to_string();
    match answer.await {
        Ok(Ok((status, response))) => {
            committer.settled(&id, &key);
            (json(status, crate::http::response_bytes(response)), Some(id))
        }
        Ok(Err(Failed::Store(e) | Failed::Locked(e))) if committer.maybe_stored(&id, &key) => {
            tracing::error!(strategy = %id, error = %e,
                "a retry of an alert whose commit was not confirmed could not be decided: the first may still land");
            (ApiError::SharedStoreUnconfirmed(e).answer(), Some(id))
        }
        Ok(Err(Failed::Store(e))) => {
            tracing::error!(strategy = %id, error = %e, "an alert could not be decided on the shared database");
            (ApiError::SharedStore(e).answer(), Some(id))
        }
        Ok(Err(Failed::Locked(e))) => {
            tracing::error!(strategy = %id, error = %e,
                "an alert waited too long for its strategy's lock on the shared database: its holder may still land");
            (ApiError::SharedStoreLocked(e).answer(), Some(id))
        }
        Ok(Err(Failed::Unconfirmed(e))) => {
            tracing::error!(strategy = %id, error = %e,
                "an alert's commit on the shared database was not confirmed: it may be stored and trade");
            (ApiError::SharedStoreUnconfirmed(e).answer(), Some(id))
        }
        Ok(Err(Failed::Busy)) | Err(_) => {
            // The request log counts a 503 without a line of its own: this one came after the alert was queued.
            tracing::warn!(strategy = %id, "an alert was not decided: the shared database's batches have stopped");
            (ApiError::Busy.answer(), Some(id))
        }
    }
}

async fn commit_loop(app: Arc<App>, shield: Arc<Shield>, rx: Arc<Mutex<mpsc::Receiver<Job>>>, lanes: Arc<Lanes>) {
    // Repeats of an alert already in a batch wait for the next one, so that they find its claim committed
    // (or given back) as a repeat on another server would.
    let mut carried: Vec<Job> = Vec::new();
    let mut last = 0;
    loop {
        let mut jobs = std::mem::take(&mut carried);
        // With jobs carried over, the queue is only looked at if no other task is waiting on it: that task may
        // wait for a new alert indefinitely, and the carried ones must not wait with it.
        let queue = if jobs.is_empty() { Some(rx.lock().await) } else { rx.try_lock().ok() };
        if let Some(mut rx) = queue {
            if jobs.is_empty() {
                match rx.recv().await {
                    Some(j) => jobs.push(j),
                    None => return,
                }
            }
            gather(&mut rx, &mut jobs, last, gather_threshold(shield.budget.in_use().0)).await;
        }
        last = jobs.len();
        let jobs = lanes.queue(jobs);
        let mut keys = HashSet::new();
        let (mut batch, later): (Vec<Job>, Vec<Job>) =
            jobs.into_iter().partition(|j| keys.insert((j.strategy.clone(), j.key.clone())));
        carried = later;
        if batch.is_empty() {
            continue;
        }
        let mut held = Vec::new();
        let answers = settle(&app, &shield, &mut batch, batch::Lock::Brief, &mut held).await;
        lanes.open(&app, &shield, held);
        answer(&app, &shield, batch, answers);
    }
}

/// Answers `jobs` in order, each with its answer or all with the batch's failure.
fn answer(
    app: &Arc<App>,
    shield: &Arc<Shield>,
    jobs: Vec<Job>,
    answers: Result<Vec<(u16, std::borrow::Cow<'static, str>)>, Failed>,
) {
    let answers = match answers {
        Ok(a) => a.into_iter().map(Ok).collect(),
        Err(f) => vec![Err(f); jobs.len()],
    };
    for (job, answer) in jobs.into_iter().zip(answers) {
        if let Some((e, row)) = answer.as_ref().err().and_then(Failed::not_stored_row) {
            not_stored(app, shield, &job, e, row);
        }
        let _ = job.done.send(answer);
    }
}

/// The Logs' ERROR row of an alert whose batch failed, as the embedded database's hand-off writes one: the
/// rolled-back batch took the alert's own rows with it. Queued here rather than by the handler, which a sender
/// that hangs up drops; through the writer, whose rows nobody waits for are committed later should this commit
/// fail too (PostgreSQL still down). In a task of its own, so that neither the answers nor the next batch wait
/// for it. Not for a retry whose first attempt may still land: "nothing was sent" would be false, and its
/// answer says so.
fn not_stored(app: &Arc<App>, shield: &Arc<Shield>, job: &Job, e: &StoreError, row: NotStoredRow) {
    if app.committer.get().is_some_and(|c| c.maybe_stored(&job.strategy, &job.key)) {
        return;
    }
    let (app, shield, e) = (Arc::clone(app), Arc::clone(shield), e.clone());
    let (strategy, received_ms) = (job.strategy.clone(), job.received_ms);
    let (body, ct) = (job.body.clone(), job.content_type.clone());
    tokio::spawn(async move {
        // The batch may have failed before deciding the alert: its alerts are read from the body (a long one on
        // the decision pool, as for its key), so the row says which alert to send again.
        let short = body.len() <= crate::webhook::DECIDE_HERE_MAX;
        let read =
            move || strategy_webhook::parse(&body, ct.as_deref()).ok().and_then(|a| serde_json::to_string(&a).ok());
        let alerts = shield.cpu.run_short_here(&strategy, short, read).await.ok().flatten();
        app.writer.log(Some(row(&strategy, alerts, &e, received_ms)), None).await;
    });
}

/// How many alerts in the last batch say that a server with `connections` open is under load.
fn gather_threshold(connections: u32) -> usize {
    (usize::try_from(connections).unwrap_or(usize::MAX) / 2).clamp(GATHER_SIBLINGS_MIN, GATHER_SIBLINGS)
}

/// Takes the alerts already queued and, when the last batch held `last` alerts and that is at least `threshold`
/// (the server is under load), those that come within [`GATHER`]; up to a batch's size.
async fn gather<T>(rx: &mut mpsc::Receiver<T>, jobs: &mut Vec<T>, last: usize, threshold: usize) {
    drain(rx, jobs);
    if last < threshold {
        return;
    }
    let until = tokio::time::Instant::now() + GATHER;
    while jobs.len() < BATCH {
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Some(j)) => {
                jobs.push(j);
                drain(rx, jobs);
            }
            Ok(None) | Err(_) => break,
        }
    }
}

/// Takes the alerts already queued, up to a batch's size.
fn drain<T>(rx: &mut mpsc::Receiver<T>, jobs: &mut Vec<T>) {
    while jobs.len() < BATCH {
        match rx.try_recv() {
            Ok(j) => jobs.push(j),
            Err(_) => break,
        }
    }
}

/// The most a batch waits for PostgreSQL to open it (locks, counts, claims), and then to commit it. A connection
/// to a database that hangs (its host frozen, or cut off without a reset) answers nothing and stays open:
/// without a limit the batch, and every alert behind it, would wait until the kernel gives the connection up,
/// many minutes later. Past the opening's wait the batch is given up (its connection closed, so its transaction
/// is rolled back) and its alerts are answered 500 within a sender's usual 10 s. Past the commit's, the commit
/// may still land (PostgreSQL may have it, waiting for a synchronous standby, or may run it once its host runs
/// again): its alerts are answered 500 saying so, never that nothing was sent (a retry of a stored one is a
/// duplicate). The opening's wait outlasts PostgreSQL's limit on a session idle in a transaction (see
/// `store::pg`), so that a batch behind the locks of a server frozen in its own batch is decided, not refused.
const OPEN_WAIT: std::time::Duration = std::time::Duration::from_secs(7);
/// See [`OPEN_WAIT`].
const COMMIT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
// A lock wait must end in PostgreSQL's own error, which tells it apart from a database that does not answer.
const _: () = assert!((batch::LOCK_WAIT_MS as u128) < OPEN_WAIT.as_millis());

/// `f`, or an error once `until` has passed.
async fn in_time<T>(
    until: tokio::time::Instant,
    f: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout_at(until, f).await {
        Ok(r) => r,
        Err(_) => Err(StoreError::Unreachable("no answer in time".into())),
    }
}

/// Decides and stores a batch of alerts (each key at most once) in one transaction, taking their strategies'
/// locks as `lock` says; answers the alerts left in `jobs`, in order. Those of strategies whose lock another
/// transaction holds past the brief wait ([`batch::Lock::Brief`]) are moved to `held`, nothing of them stored.
async fn settle(
    app: &Arc<App>,
    shield: &Shield,
    jobs: &mut Vec<Job>,
    lock: batch::Lock,
    held: &mut Vec<Job>,
) -> Result<Vec<(u16, std::borrow::Cow<'static, str>)>, Failed> {
    let Some(pg) = &app.shared else { return Err(Failed::Busy) };
    let limits = app.engine.store().limits();
    let mut strategies: Vec<&str> = jobs.iter().map(|j| j.strategy.as_str()).collect();
    strategies.sort_unstable();
    strategies.dedup();
    // The batch's time, taken before its locks: every alert of it is counted and claimed at this moment. A batch
    // on another server may take its time later and the locks first; the window's count reads the marks after
    // the batch's time too, so it stays exact.
    let now = now_ms();
    // Each strategy's alerts in the batch: the most it can count against the window.
    let demand: Vec<(&str, i64)> =
        strategies.iter().map(|s| (*s, jobs.iter().filter(|j| j.strategy == *s).count() as i64)).collect();
    let keys: Vec<(&str, &str)> = jobs.iter().map(|j| (j.strategy.as_str(), j.key.as_str())).collect();
    // The batch's opening (its locks, counts and claims) within one wait, and its commit within another.
    // A server whose clock is off the database's stamps times its peers misjudge (a market order's, taken for one
    // stored under a clock gone back, expired unsent): refused before anything is claimed, the sender's retry may
    // reach a server whose clock is right.
    if let Some(e) = pg.clock_off() {
        return Err(Failed::Store(e));
    }
    let began = std::time::Instant::now();
    let opening = tokio::time::Instant::now() + OPEN_WAIT;
    let batch::Started { batch: tx, opened, mut fresh, db_ms, busy } =
        in_time(opening, batch::start(pg, &demand, &keys, now, limits, lock)).await.map_err(Failed::opening)?;
    // Dropped here unanswered, the batch's claims roll back ([`batch::clock_agrees`]).
    batch::clock_agrees(db_ms, now).map_err(Failed::opening)?;
    if !busy.is_empty() {
        let (kept, left): (Vec<_>, Vec<_>) =
            std::mem::take(jobs).into_iter().zip(fresh).partition(|(j, _)| !busy.contains(&j.strategy));
        (*jobs, fresh) = kept.into_iter().unzip();
        held.extend(left.into_iter().map(|(j, _)| j));
        if jobs.is_empty() {
            // The transaction holds no lock and stored nothing; committed, its connection goes back to the pool.
            let _ = in_time(tokio::time::Instant::now() + COMMIT_WAIT, tx.finish(now, &[], false)).await;
            return Ok(Vec::new());
        }
    }
    let jobs: &[Job] = jobs;
    let keys: Vec<(&str, &str)> = jobs.iter().map(|j| (j.strategy.as_str(), j.key.as_str())).collect();
    for (s, states) in opened.states {
        app.adopt_bot_states(&s, states, None);
    }
    // A token rotated through another server's admin API is applied here before any alert is decided, so the
    // old token answers 404 on every server from the rotation's commit on (the poll only catches up the new
    // token's head-time check).
    for (s, token) in &opened.tokens {
        if let Some(t) = TokenHash::parse(token.as_bytes()) {
            app.adopt_token_read(s, t, Some(began));
        }
    }
    let current = |j: &Job| opened.tokens.get(&j.strategy).map_or(true, |t| *t == j.token);
    // The rate windows' room goes to the alerts in the order they came; an alert over it is answered 429 and
    // keeps no claim, as the engine's order of checks has it. An alert whose token was rotated away is answered
    // 404 before the rate step: it takes no room.
    let mut room = opened.room;
    let within: Vec<bool> = jobs
        .iter()
        .map(|j| match room.get_mut(&j.strategy) {
            Some(r) if *r > 0 && current(j) => {
                *r -= 1;
                true
            }
            _ => false,
        })
        .collect();
    let (to_claim, was_fresh): (Vec<(&str, &str)>, Vec<bool>) =
        keys.iter().zip(&within).zip(&fresh).filter(|((_, w), _)| **w).map(|((k, _), f)| (*k, *f)).unzip();
    let mut claims = in_time(opening, tx.claims(&to_claim, &was_fresh)).await.map_err(Failed::opening)?.into_iter();
    let answered: Vec<(bool, Claim)> =
        within.iter().map(|&w| (w, if w { claims.next().unwrap_or(Claim::Fresh) } else { Claim::Fresh })).collect();
    let settled: Vec<Arc<Settled>> = answered.iter().map(|&(w, c)| Arc::new(Settled::new(w, c))).collect();

    let outcomes = decide(app, shield, jobs, &settled, now).await?;
    for job in jobs {
        drop(job.in_flight.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
    let mut decided = Vec::with_capacity(jobs.len());
    let mut answers = Vec::with_capacity(jobs.len());
    let mut wake: Vec<(String, String)> = Vec::new();
    let mut durable = false;
    for ((((job, s), &(within, claim)), &fresh), mut outcome) in
        jobs.iter().zip(&settled).zip(&answered).zip(&fresh).zip(outcomes)
    {
        // A key this batch claimed and the engine did not keep (an error answer, or no decision) is given back,
        // as is one claimed for an alert answered before the claim (over the rate limit, or a rotated token).
        let unclaim = if within { claim == Claim::Fresh && !s.keeps_claim() } else { fresh };
        let unclaim = unclaim.then(|| job.key.clone());
        if outcome.strategy.as_deref() != Some(job.strategy.as_str()) {
            // The token stopped naming this strategy in between: nothing was counted, and the key claimed ahead
            // of the answer is given back. Rotated away, the engine's 404 is the answer. Moved to another
            // strategy (a file replaced by one with the same token), the engine decided it for that one, whose
            // window and claim this batch never took: that answer ("processed", with no order stored) would be
            // false, so the sender is asked to retry, which is decided for the strategy the token now names.
            // Whether the engine kept a claim speaks for that strategy, not this one: every key this batch
            // claimed here goes back, or the retry, should the token name this strategy again, is a duplicate.
            let unclaim = fresh.then(|| job.key.clone());
            decided.push(Decided { strategy: job.strategy.clone(), unclaim, ..Decided::default() });
            match &outcome.strategy {
                Some(now_named) => {
                    tracing::warn!(strategy = %job.strategy, now = %now_named,
                        "an alert's token moved to another strategy while it waited for its batch; answered 503");
                    let e = crate::error::ApiError::StrategyChanged;
                    answers.push((e.status(), e.body().into()));
                }
                None => answers.push((outcome.http_status, std::mem::take(&mut outcome.response))),
            }
            continue;
        }
        crate::metrics::alert(&outcome);
        let processed = outcome.decision == Decision::Processed;
        durable |= processed;
        // A market order's deadline counts from the alert's arrival: decided after a wait behind a batch that
        // waited on PostgreSQL, it got a fresh deadline from the batch and was sent that much later.
        let rows =
            if processed { app.outbox_rows(&job.strategy, &mut outcome, job.received_ms.min(now)) } else { Vec::new() };
        for r in &rows {
            let bot = (job.strategy.clone(), r.bot.clone());
            if !wake.contains(&bot) {
                wake.push(bot);
            }
        }
        let (status, response) = (outcome.http_status, std::mem::take(&mut outcome.response));
        if status == 429 {
            shield.refusals.note(&job.strategy, now);
        }
        decided.push(Decided {
            strategy: job.strategy.clone(),
            counted: s.counted(),
            unclaim,
            // Stamped as its rows are (the alert's arrival): the Logs view finds an alert's broker requests by
            // that time, and stamped at the batch's, an alert of a busy moment showed "No broker request".
            log: LogEntry::from_outcome(outcome, job.received_ms.min(now)),
            rows,
        });
        answers.push((status, response));
    }
    if durable && !app.freshness.commit_delay.is_zero() {
        tokio::time::sleep(app.freshness.commit_delay).await;
    }
    // A commit unanswered in time is not cancelled: one held by a synchronous standby that is away has landed
    // only on the primary, and cancelling its wait would make it visible and its orders go out with no standby
    // holding it, which the deploy guide's standby is there to prevent. It is left to land once a standby
    // confirms it (or to be lost with the primary), and its alerts are answered as maybe stored.
    let committing = tokio::time::Instant::now() + COMMIT_WAIT;
    crate::metrics::commit(in_time(committing, tx.finish(now, &decided, durable))).await.map_err(|e| {
        if e.commit_unconfirmed() {
            if let Some(c) = app.committer.get() {
                c.note_unconfirmed(jobs, now.saturating_add(limits.dedup_window_ms));
            }
            Failed::Unconfirmed(e)
        } else {
            Failed::Store(e)
        }
    })?;
    crate::metrics::store_transaction(began, jobs.iter().map(|j| j.queued));
    for (strategy, bot) in wake {
        app.dispatcher.wake(app, &strategy, &bot);
    }
    Ok(answers)
}

/// One alert for its strategy's pool job: its place in the batch, its answers, token, body and content type.
type Work = (usize, Arc<Settled>, String, Bytes, Option<String>);

/// Decides a batch's alerts with their settled answers: one job per strategy, deciding its alerts in the order
/// they came; a strategy's short alerts right here when it is idle, the others on the pool, side by side.
async fn decide(
    app: &Arc<App>,
    shield: &Shield,
    jobs: &[Job],
    settled: &[Arc<Settled>],
    now: i64,
) -> Result<Vec<Outcome>, Failed> {
    let mut by_strategy: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, j) in jobs.iter().enumerate() {
        by_strategy.entry(j.strategy.as_str()).or_default().push(i);
    }
    let mut out: Vec<Option<Outcome>> = (0..jobs.len()).map(|_| None).collect();
    let mut pooled = Vec::new();
    for (strategy, idx) in by_strategy {
        // A strategy's alerts are decided right here when it is idle and their bodies together are no longer
        // than one body the webhook decides on its worker (so a batch holds a worker no longer per strategy
        // than one such alert does, and yields between strategies); others, and a busy strategy's, on the pool.
        let short = idx.iter().map(|&i| jobs[i].body.len()).sum::<usize>() <= crate::webhook::DECIDE_HERE_MAX;
        let work: Vec<Work> = idx
            .iter()
            .map(|&i| {
                (i, Arc::clone(&settled[i]), jobs[i].token.clone(), jobs[i].body.clone(), jobs[i].content_type.clone())
            })
            .collect();
        let app = Arc::clone(app);
        let run = move || {
            work.into_iter()
                .map(|(i, s, token, body, ct)| {
                    (
                        i,
                        crate::metrics::decide(|| {
                            app.engine.deliver_settled(&s, token.as_bytes(), &body, ct.as_deref(), now)
                        }),
                    )
                })
                .collect::<Vec<_>>()
        };
        let run = if short {
            match shield.cpu.run_here(strategy, run) {
                Here::Done(done) => {
                    for (i, o) in done {
                        out[i] = Some(o);
                    }
                    // The async worker's other tasks get their turn between strategies.
                    tokio::task::yield_now().await;
                    continue;
                }
                Here::Panicked => return Err(Failed::Busy),
                Here::Busy(run) => run,
            }
        } else {
            run
        };
        pooled.push(shield.cpu.run(strategy, run));
    }
    for run in futures_util::future::join_all(pooled).await {
        for (i, o) in run.map_err(|_| Failed::Busy)? {
            out[i] = Some(o);
        }
    }
    out.into_iter().map(|o| o.ok_or(Failed::Busy)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Sends `n` items at `at` after the start (on tokio's paused clock, whose timers have a millisecond's
    /// granularity; a zero `at` sends them as soon as the test's task waits).
    fn send_at(tx: &mpsc::Sender<u32>, at: Duration, n: u32) {
        let tx = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            for i in 0..n {
                tx.send(i).await.unwrap();
            }
        });
    }

    /// A batch queue with three alerts already waiting.
    async fn three_queued() -> (mpsc::Sender<u32>, mpsc::Receiver<u32>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        for i in 0..3 {
            tx.send(i).await.unwrap();
        }
        (tx, rx)
    }

    #[tokio::test(start_paused = true)]
    async fn under_load_a_batch_takes_in_what_comes_within_the_wait() {
        let (tx, mut rx) = three_queued().await;
        send_at(&tx, Duration::ZERO, 20);
        send_at(&tx, GATHER * 3, 5);
        let mut jobs = Vec::new();
        let start = tokio::time::Instant::now();
        gather(&mut rx, &mut jobs, GATHER_SIBLINGS, GATHER_SIBLINGS).await;
        assert_eq!(jobs.len(), 23, "the queued ones and those within the wait, not those after it");
        assert!(start.elapsed() >= GATHER && start.elapsed() < GATHER * 3, "{:?}", start.elapsed());
    }

    /// An alert answered `store_locked` may be stored by another attempt still committing: its Logs row said
    /// "nothing of this attempt was sent … look for it in these Logs before sending it again by hand", and the
    /// attempt holding the lock, not in the Logs until it lands, was placed a second time by hand.
    #[test]
    fn a_lock_waits_row_says_not_to_place_the_alert_by_hand() {
        let row = |f: &Failed| {
            let (e, row) = f.not_stored_row().expect("a row");
            row("s", None, e, 0).records.remove(0).1
        };
        let e = || StoreError::Unreachable("no answer in time".into());
        let locked = row(&Failed::Locked(e()));
        assert!(locked.contains("store_locked") && locked.contains("Do not place it by hand"), "{locked}");
        assert!(!locked.contains("sending it again by hand") && !locked.contains("was sent"), "{locked}");
        assert!(row(&Failed::Store(e())).contains("before sending it again by hand"));
        assert!(Failed::Unconfirmed(e()).not_stored_row().is_none() && Failed::Busy.not_stored_row().is_none());
    }

    /// An alert of `strategy` keyed `key`, whose answer nobody waits for.
    fn job(strategy: &str, key: &str) -> Job {
        Job {
            strategy: strategy.into(),
            token: String::new(),
            body: Bytes::new(),
            content_type: None,
            key: key.into(),
            done: oneshot::channel().0,
            queued: std::time::Instant::now(),
            received_ms: 0,
            in_flight: std::sync::Mutex::new(None),
        }
    }

    fn keys(jobs: &[Job]) -> Vec<(&str, &str)> {
        jobs.iter().map(|j| (j.strategy.as_str(), j.key.as_str())).collect()
    }

    /// A strategy waiting for its lock in a lane takes its new alerts behind the ones there (an open, then its
    /// close), a repeat waiting for the lane's next batch; the others go on to the commit loop's batch. Once its
    /// lane is empty, it closes, and the strategy's alerts go to the commit loop's batches again.
    #[test]
    fn a_lane_takes_its_strategys_alerts_in_the_order_they_came_until_it_closes() {
        let lanes = Lanes {
            waiting: std::sync::Mutex::new(HashMap::from([("a".to_owned(), VecDeque::from([job("a", "open")]))])),
            connections: Semaphore::new(1),
        };
        let left = lanes.queue(vec![job("b", "x"), job("a", "close"), job("a", "open"), job("a", "next")]);
        assert_eq!(keys(&left), [("b", "x")]);
        assert_eq!(keys(&lanes.next("a")), [("a", "open"), ("a", "close"), ("a", "next")]);
        assert_eq!(keys(&lanes.next("a")), [("a", "open")], "the repeat, in the next batch");
        assert!(lanes.next("a").is_empty());
        assert!(lanes.waiting().is_empty(), "the empty lane closed");
        assert_eq!(keys(&lanes.queue(vec![job("a", "later")])), [("a", "later")]);
    }

    #[test]
    fn a_server_with_few_connections_counts_a_smaller_batch_as_load() {
        // One server taking all the senders, one of three sharing them, a quiet one.
        assert_eq!(gather_threshold(50), GATHER_SIBLINGS);
        assert_eq!(gather_threshold(17), 8);
        assert_eq!(gather_threshold(3), GATHER_SIBLINGS_MIN);
        assert_eq!(gather_threshold(0), GATHER_SIBLINGS_MIN);
        assert_eq!(gather_threshold(u32::MAX), GATHER_SIBLINGS);
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_light_batch_a_batch_starts_at_once() {
        let (tx, mut rx) = three_queued().await;
        send_at(&tx, Duration::ZERO, 20);
        let mut jobs = Vec::new();
        let start = tokio::time::Instant::now();
        gather(&mut rx, &mut jobs, GATHER_SIBLINGS - 1, GATHER_SIBLINGS).await;
        assert_eq!((jobs.len(), start.elapsed()), (3, Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_starts_without_waiting_out_the_gather() {
        let (tx, mut rx) = mpsc::channel(QUEUE);
        send_at(&tx, Duration::ZERO, BATCH as u32 + 7);
        let mut jobs = Vec::new();
        let start = tokio::time::Instant::now();
        gather(&mut rx, &mut jobs, BATCH, GATHER_SIBLINGS).await;
        assert_eq!(jobs.len(), BATCH);
        assert!(start.elapsed() < GATHER, "{:?}", start.elapsed());
        // The rest stay queued for the next batch.
        let mut next = Vec::new();
        drain(&mut rx, &mut next);
        assert_eq!(next.len(), 7);
    }
}
