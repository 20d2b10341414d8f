//! `POST /webhooks/{token}`: routed from the request head, read within the budget, decided on the fair pool.
//!
//! The core's order of checks is 400 (token shape), 404 (unknown token), 413 (body over 256 KiB), 429 (rate),
//! then the rest, which needs the body. The first four need no body, so they are answered from the head:
//!
//! 1. **400 / 404**: the engine's own first two checks on the token ([`Engine::route`], which touches no
//!    state); no body byte is read or buffered for a request no strategy will take.
//! 2. **413**: a `Content-Length` over the limit, as before.
//! 3. **429**: when the strategy's rate window is already full ([`StateStore::peek_count`], which records
//!    nothing), the engine's 429 is answered at once. The engine stays the one that counts: a delivery is
//!    counted only when `Engine::deliver` runs, so this early refusal never double counts and never uses up
//!    the budget (a 429 does not count, as in the core). A chunked body of unknown size is first counted
//!    (not kept) to tell the core's 413 from its 429.
//! 4. Then a slot in the in-flight budget (else 503 with `Retry-After`), the body read at a minimum rate, and
//!    the decision on the [`CpuPool`] in the strategy's turn.
//!
//! [`Engine::route`]: strategy_webhook::Engine::route
//! [`StateStore::peek_count`]: strategy_webhook::state::StateStore::peek_count

use crate::app::{now_ms, App, Committing};
use crate::budget::Budget;
use crate::cpu::CpuPool;
use crate::error::ApiError;
use crate::http::{content_length, json, read_body_paced, response_bytes, Answer, Body, Peer};
use crate::refusals::RateRefusals;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE, TRANSFER_ENCODING};
use hyper::Request;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use strategy_webhook::engine::dedup_key;
use strategy_webhook::outcome::Outcome;
use strategy_webhook::state::StateStore;
use strategy_webhook::{Decision, MAX_BODY};

/// Bodies up to this size are decided on the async worker that read them when their strategy is idle (a
/// decision of a few microseconds; the linear-time parser bounds a hostile one of this size to tens of them);
/// larger ones always go to the pool.
pub(crate) const DECIDE_HERE_MAX: usize = 4096;

/// What guards the public listener besides the engine: the connection budget, the decision pool, the
/// rate-limit refusal counters, and the slowest body accepted.
pub struct Shield {
    /// Connections and requests in flight.
    pub budget: Arc<Budget>,
    /// Where bodies are parsed and decided.
    pub cpu: CpuPool,
    /// Refused deliveries, counted for one WARN row per strategy and window.
    pub refusals: RateRefusals,
    /// Slowest body accepted, bytes per second.
    pub min_body_rate: u32,
}

/// A zero-filled body one byte over the limit: what the engine is shown for a body announced or found to be
/// too large, so that the core's order of checks (400, 404, then 413) decides the answer.
static OVERSIZED: [u8; MAX_BODY + 1] = [0; MAX_BODY + 1];

/// The webhook: answers with the Outcome's status and body, and records its log rows.
pub async fn webhook(
    app: &Arc<App>,
    shield: &Arc<Shield>,
    token: &str,
    req: Request<Incoming>,
) -> (Answer, Option<String>) {
    let content_type = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let declared = content_length(&req);
    let chunked = declared.is_none() && req.headers().contains_key(TRANSFER_ENCODING);
    let has_body = chunked || declared.is_some_and(|n| n > 0);
    let peer = req.extensions().get::<Peer>().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |p| p.0);
    let now = now_ms();

    // The token's 400 or 404 from the engine's own first checks, before any body byte is read.
    let (id, strategy_id) = match app.engine.route(token.as_bytes()) {
        Ok(strategy) => (strategy.id.to_string(), Arc::clone(&strategy.id)),
        Err(answer) => return (unread(json(answer.http_status, response_bytes(answer.response)), has_body), None),
    };
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large(app, shield, token, content_type.as_deref()).await;
    }
    if !app.engine.store().peek_count(&id, now) {
        return rate_limited(app, shield, token, req, content_type.as_deref(), id, now).await;
    }

    let in_flight = match shield.budget.request(peer, &strategy_id) {
        Ok(p) => p,
        Err(crate::budget::Full::Server) => return (unread(ApiError::Busy.answer(), has_body), Some(id)),
        // As many of this strategy's alerts are in flight as its window admits: answered as one over the rate
        // limit, as when its window is full.
        Err(crate::budget::Full::Strategy) => {
            return rate_limited(app, shield, token, req, content_type.as_deref(), id, now).await;
        }
    };
    // Held by the work queued for this request too, not only by this handler: a sender that hangs up drops the
    // handler, and its body, queued behind a busy strategy or a stalled database, would wait outside the cap
    // (on a shared database, thousands of 256 KiB bodies while PostgreSQL stalls). Given up while the alert
    // waits for a read back (below).
    let in_flight = Arc::new(in_flight);
    let bytes = match read_body_paced(req.into_body(), declared, MAX_BODY, shield.min_body_rate, true).await {
        Body::Complete(b) => b,
        Body::TooLarge => return too_large(app, shield, token, content_type.as_deref()).await,
        Body::Failed(why) => return (unread(ApiError::BodyNotReceived(why).answer(), true), Some(id)),
        Body::Malformed(why) => return (unread(ApiError::MalformedBody(why).answer(), true), Some(id)),
    };
    // The alert is here: its orders' deadlines count from now, not from its turn on the decision pool.
    let received = now_ms();
    if app.shared.is_some() {
        return crate::shared::webhook(app, shield, token, bytes, content_type, id, in_flight).await;
    }
    let mut in_flight = Some(in_flight);
    let rt = tokio::runtime::Handle::current();
    // A retry of an alert whose first attempt is still being committed waits for that commit; if it failed
    // (and gave its key back) the alert is decided again. Twice is enough: a second failure is answered.
    for _ in 0..3 {
        let job = {
            let (app, shield, token, body, ct, rt) = (
                Arc::clone(app),
                Arc::clone(shield),
                token.to_owned(),
                bytes.clone(),
                content_type.clone(),
                rt.clone(),
            );
            let in_flight = in_flight.clone();
            move || {
                // In the strategy's turn, so that an entry decided just before is marked (`read_back.rs`).
                if let Some(awaited) = held_up(&app, &token, &body, ct.as_deref()) {
                    let turn = shield.cpu.keep_turn(&awaited.0);
                    return Decided::HeldUp(Box::new(HeldUp { awaited: awaited.1, turn }));
                }
                let decided = decide(&app, &rt, &token, &body, ct.as_deref(), received, None);
                drop(in_flight);
                decided
            }
        };
        // A short body is decided right here when its strategy is idle (its cost is bounded and small, and the
        // strategy's turn is kept); anything else goes to the pool.
        let job = shield.cpu.run_short_here(&id, bytes.len() <= DECIDE_HERE_MAX, job).await;
        let decided = match job {
            Ok(Decided::HeldUp(held)) => {
                // The strategy's turn is kept through the wait, but not the alert's slot in the in-flight cap: a
                // CLOSE waiting for a read back must not make another strategy's alert from its address a 503.
                in_flight = None;
                let waited = {
                    let (app, token, body, ct, rt) =
                        (Arc::clone(app), token.to_owned(), bytes.clone(), content_type.clone(), rt.clone());
                    // A task of its own: the alert is decided (and its hand-off begun) whether or not the sender
                    // waits for the answer, as one queued on the pool is.
                    tokio::spawn(async move { decide_after_read_back(app, rt, token, body, ct, received, *held).await })
                };
                match waited.await.and_then(|d| d) {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::warn!(strategy = %id, error = %e, "an alert waiting for a read back was not decided");
                        return (ApiError::Busy.answer(), Some(id));
                    }
                }
            }
            Ok(d) => d,
            Err(stopped) => {
                tracing::warn!(strategy = %id, error = %stopped, "an alert was not decided");
                return (ApiError::Busy.answer(), Some(id));
            }
        };
        match decided {
            Decided::Answered(outcome, now) => {
                // Decided: the request's slot in the in-flight cap, and its body, go now (see below).
                drop((in_flight, bytes));
                return finish(app, shield, outcome, now, false).await;
            }
            Decided::Recorded { status, response, strategy } => {
                return (unread(json(status, response_bytes(response)), false), strategy)
            }
            Decided::HandedOff { status, response, strategy, commit } => {
                // The slot counts requests being read or decided (docs/server.md), and the body is no longer
                // needed: held through the durable commit as well, a burst of alerts from one address at a bar's
                // close (a charting platform sends many users' from a few) met the per-address cap while the
                // commits ran, and was refused 503 well under any rate limit.
                drop((in_flight, bytes));
                // The task commits whether or not this handler lives on to answer.
                return match commit.await {
                    Ok(Ok(())) => (unread(json(status, response_bytes(response)), false), strategy),
                    Ok(Err(e)) => {
                        tracing::error!(strategy = strategy.as_deref().unwrap_or("-"), error = %e, "the outbox commit failed");
                        (ApiError::HandOff(e).answer(), strategy)
                    }
                    Err(e) => {
                        tracing::error!(strategy = strategy.as_deref().unwrap_or("-"), error = %e, "the hand-off task failed");
                        (ApiError::Busy.answer(), strategy)
                    }
                };
            }
            Decided::HeldUp(_) => unreachable!("decided after its wait"),
            Decided::Waiting(outcome, now, mut first) => {
                match first.wait_for(Option::is_some).await.map(|v| *v) {
                    Ok(Some(true)) => return finish(app, shield, outcome, now, false).await,
                    // Failed and released: decide this body afresh, counted once.
                    Ok(_) => {
                        uncount(app, &outcome, now);
                        continue;
                    }
                    Err(_) => return (ApiError::Busy.answer(), Some(id)),
                }
            }
        }
    }
    (ApiError::Busy.answer(), Some(id))
}

/// What a decision on the pool came to.
enum Decided {
    /// Answered as it stands, its log rows queued by the handler (429s and duplicates of committed alerts).
    Answered(Outcome, i64),
    /// Answered as it stands, its log rows already queued where it was decided (rejected, inactive, errors): the
    /// handler of a sender that hung up never ran, and the rows saying why the alert did not trade were lost.
    Recorded { status: u16, response: std::borrow::Cow<'static, str>, strategy: Option<String> },
    /// Processed: its commit runs in a task of its own.
    HandedOff {
        status: u16,
        response: std::borrow::Cow<'static, str>,
        strategy: Option<String>,
        commit: tokio::task::JoinHandle<Result<(), crate::store::StoreError>>,
    },
    /// A duplicate of an alert whose first attempt is still being committed.
    Waiting(Outcome, i64, Committing),
    /// Not decided yet: it acts on the position of an instrument whose entry is not read back yet, and waits for
    /// the read in its strategy's turn (`read_back.rs`).
    HeldUp(Box<HeldUp>),
}

/// An alert waiting for a read back, with its strategy's turn.
pub(crate) struct HeldUp {
    awaited: crate::read_back::Awaited,
    turn: crate::cpu::Turn,
}

/// The strategy (its id) and what an alert with this body waits for before it is decided, if anything: one atomic
/// load when no entry is waiting for its read back.
fn held_up(app: &App, token: &str, body: &[u8], ct: Option<&str>) -> Option<(String, crate::read_back::Awaited)> {
    if !app.read_back.any() || app.shared.is_some() {
        return None;
    }
    let strategy = app.engine.route(token.as_bytes()).ok()?;
    let http = |bot: &str| matches!(app.bots.get(bot), crate::bots::Delivery::Http(_));
    let awaited = app.read_back.awaited(&strategy, body, ct, http)?;
    Some((strategy.id.to_string(), awaited))
}

/// Waits (bounded, see `read_back.rs`) for the read back `held` names, then decides the alert, still in its
/// strategy's turn, which passes on once the decision and its hand-off's start are done.
async fn decide_after_read_back(
    app: Arc<App>,
    rt: tokio::runtime::Handle,
    token: String,
    body: bytes::Bytes,
    ct: Option<String>,
    received: i64,
    held: HeldUp,
) -> Result<Decided, tokio::task::JoinError> {
    let HeldUp { awaited, turn } = held;
    // A bot a reload took out of the strategy (or off http) meanwhile is not waited for.
    let http = |bot: &str| {
        matches!(app.bots.get(bot), crate::bots::Delivery::Http(_))
            && app.engine.strategy(awaited.strategy()).is_some_and(|s| s.bots.iter().any(|b| *b.id == *bot))
    };
    let note = app.read_back.wait_for(&awaited, http).await;
    if let Some(n) = &note {
        tracing::warn!(strategy = %awaited.strategy(), "{n}");
    }
    // Off the async workers (a body may be large), in the turn kept: no other alert of the strategy is decided
    // before this one.
    tokio::task::spawn_blocking(move || {
        let d = decide(&app, &rt, &token, &body, ct.as_deref(), received, note.as_deref());
        drop(turn);
        d
    })
    .await
}

/// Decides a body received at `received` (its orders' deadlines count from there, whatever the wait for the
/// strategy's turn); a processed Outcome's hand-off starts here, in the strategy's turn, so that a retry decided
/// next already finds it in [`App::committing`]. `note`: a WARN row added to the alert's rows (one decided without
/// the read back it waited for).
fn decide(
    app: &Arc<App>,
    rt: &tokio::runtime::Handle,
    token: &str,
    body: &[u8],
    ct: Option<&str>,
    received: i64,
    note: Option<&str>,
) -> Decided {
    // A copy whose first attempt's commit failed meanwhile is decided again; twice at most, as a bound.
    let mut again = 2;
    loop {
        let now = now_ms();
        let mut outcome = crate::metrics::decide(|| app.engine.deliver(token.as_bytes(), body, ct, now));
        if let Some(n) = note.filter(|_| outcome.strategy.is_some() && outcome.http_status == 200) {
            outcome.log(strategy_webhook::Level::Warn, n);
        }
        return match outcome.decision {
            Decision::Processed => {
                // Counted here: a processed alert's answer does not go through `finish`.
                let (status, response, strategy) = answered(&mut outcome);
                let commit = app.begin_hand_off(rt, outcome, now, received);
                Decided::HandedOff { status, response, strategy, commit }
            }
            Decision::Duplicate => match first_attempt(app, &outcome, body, ct, now) {
                First::Committing(f) => Decided::Waiting(outcome, now, f),
                First::GaveBack if again > 0 => {
                    again -= 1;
                    uncount(app, &outcome, now);
                    continue;
                }
                First::GaveBack | First::Stored => Decided::Answered(outcome, now),
            },
            // The 429's row is counted per window by the handler (`refusals.rs`).
            _ if outcome.http_status == 429 => Decided::Answered(outcome, now),
            _ => {
                let (status, response, strategy) = answered(&mut outcome);
                app.record_in_turn(outcome, now);
                Decided::Recorded { status, response, strategy }
            }
        };
    }
}

/// Counts an Outcome in the metrics and takes out what its answer needs (status, response, strategy), leaving
/// the rest to be stored.
fn answered(outcome: &mut Outcome) -> (u16, std::borrow::Cow<'static, str>, Option<String>) {
    crate::metrics::alert(outcome);
    (outcome.http_status, std::mem::take(&mut outcome.response), outcome.strategy.as_deref().map(str::to_owned))
}

/// Takes back the rate mark of a copy answered `duplicate` at `now` that is decided again: counted at each
/// decision, one POST took two or three of the window's 60, and a sender near the limit was refused early.
fn uncount(app: &App, outcome: &Outcome, now: i64) {
    if let Some(strategy) = outcome.strategy.as_deref() {
        app.engine.store().uncount(strategy, now);
    }
}

/// What became of the first attempt of an alert the engine answered `duplicate`.
#[derive(Debug)]
enum First {
    /// Its commit is still in progress: the copy waits for it.
    Committing(Committing),
    /// It was stored (or, without a readable key, is taken to be): the duplicate answer stands.
    Stored,
    /// Its commit failed and gave the key back after the engine found it claimed, before its entry was looked
    /// for here: nothing of it is stored, and this copy is the alert. Answered `duplicate`, it was lost.
    GaveBack,
}

/// Only duplicates pay for the second parse that finds their key.
fn first_attempt(app: &App, outcome: &Outcome, body: &[u8], ct: Option<&str>, now: i64) -> First {
    let Some(strategy) = outcome.strategy.as_deref() else { return First::Stored };
    let key = dedup_key(body, &strategy_webhook::parse(body, ct));
    if let Some(f) = app.committing(strategy, &key) {
        return First::Committing(f);
    }
    match app.engine.store().peek_claim(strategy, &key, now) {
        strategy_webhook::state::Claim::Fresh => First::GaveBack,
        strategy_webhook::state::Claim::Duplicate { .. } => First::Stored,
    }
}

/// A delivery over the rate limit, answered 429 before its body is kept. A chunked body (whose size the head does
/// not say) is counted, not kept, up to the size limit first: the core's order of checks answers 413 before 429.
async fn rate_limited(
    app: &Arc<App>,
    shield: &Arc<Shield>,
    token: &str,
    req: Request<Incoming>,
    content_type: Option<&str>,
    id: String,
    now: i64,
) -> (Answer, Option<String>) {
    let declared = content_length(&req);
    let chunked = declared.is_none() && req.headers().contains_key(TRANSFER_ENCODING);
    let has_body = chunked || declared.is_some_and(|n| n > 0);
    if chunked {
        match read_body_paced(req.into_body(), None, MAX_BODY, shield.min_body_rate, false).await {
            Body::TooLarge => return too_large(app, shield, token, content_type).await,
            Body::Complete(_) => {}
            Body::Failed(why) => return (unread(ApiError::BodyNotReceived(why).answer(), true), Some(id)),
            Body::Malformed(why) => return (unread(ApiError::MalformedBody(why).answer(), true), Some(id)),
        }
    }
    shield.refusals.note(&id, now);
    let o = Outcome::rate_limited();
    (unread(json(o.http_status, response_bytes(o.response)), has_body && !chunked), Some(id))
}

/// The core's 413 for a body over the limit (announced, or found while reading). The rest of the body is never
/// read, so the connection cannot carry another request.
async fn too_large(
    app: &Arc<App>,
    shield: &Shield,
    token: &str,
    content_type: Option<&str>,
) -> (Answer, Option<String>) {
    let now = now_ms();
    // Cheap: the engine stops at the size check, before parsing (and before the rate count).
    let mut outcome = app.engine.deliver(token.as_bytes(), &OVERSIZED, content_type, now);
    // Counted into one ERROR row per strategy and window (`refusals.rs`), not one row each: a 413 costs the
    // sender nothing, and a row each let a token holder flood the strategy's Logs past its cap.
    if outcome.strategy.is_none() {
        return finish(app, shield, outcome, now, true).await;
    }
    let (status, response, strategy) = answered(&mut outcome);
    if let Some(s) = &strategy {
        shield.refusals.note_too_large(s, now);
    }
    (unread(json(status, response_bytes(response)), true), strategy)
}

/// Answers an Outcome: a processed one only once its orders are committed (the durable hand-off), any other
/// with its log rows queued.
async fn finish(
    app: &Arc<App>,
    shield: &Shield,
    mut outcome: Outcome,
    now: i64,
    close: bool,
) -> (Answer, Option<String>) {
    let (status, response, strategy) = answered(&mut outcome);
    if status == 429 {
        if let Some(s) = &strategy {
            shield.refusals.note(s, now);
        }
    }
    let res = json(status, response_bytes(response));
    let res = unread(res, close);
    if outcome.decision == Decision::Processed {
        // Not reached by the webhook (its processed Outcomes are handed off where decided), kept whole for any
        // other caller: nothing is answered 200 processed before its orders and dedup key are committed.
        let rt = tokio::runtime::Handle::current();
        match app.begin_hand_off(&rt, outcome, now, now).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(strategy = strategy.as_deref().unwrap_or("-"), error = %e, "the outbox commit failed");
                return (ApiError::HandOff(e).answer(), strategy);
            }
            Err(_) => return (ApiError::Busy.answer(), strategy),
        }
    } else {
        app.record(outcome, now).await;
    }
    (res, strategy)
}

/// An answer given before the request body was read: the connection cannot carry another request, so it is
/// closed (after a short lingering read, see `http.rs`).
fn unread(mut res: Answer, body_left: bool) -> Answer {
    if body_left {
        res.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sender's copy was answered `duplicate` by the engine while the first attempt's commit was failing:
    /// the failed hand-off gave the key back and took its entry off the map before the copy looked for it.
    /// Answered duplicate, nothing of the alert was stored and the sender stopped retrying. The copy is the
    /// alert, and is decided again.
    #[tokio::test]
    async fn a_copy_whose_first_attempt_gave_its_key_back_is_decided_again() {
        let (dir, store, app) = crate::app::tests::temp_app("gaveback");
        let demo = include_bytes!("../../strategies/demo.json");
        let id = app.apply_snapshot(demo).unwrap();
        let token = app.engine.strategy(&id).unwrap().token_hash.clone();
        let body = br#"{"ticker":"AAPL","action":"buy","message_id":"gave-back"}"#;
        let ct = Some("application/json");
        let first = app.engine.deliver(token.as_str().as_bytes(), body, ct, 1_000);
        assert_eq!(first.decision, Decision::Processed, "{}", first.to_json());
        let copy = app.engine.deliver(token.as_str().as_bytes(), body, ct, 1_001);
        assert_eq!(copy.decision, Decision::Duplicate);
        // While the first attempt is stored, or being stored, the duplicate answer stands.
        assert!(matches!(first_attempt(&app, &copy, body, ct, 1_002), First::Stored));
        // Its commit failed: the key is given back (what the hand-off does), and no entry is left.
        assert!(app.engine.release(&id, first.dedup_key.as_deref().unwrap()));
        assert!(matches!(first_attempt(&app, &copy, body, ct, 1_003), First::GaveBack));
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A rejected alert's rows were queued by the handler after the decision: a sender that hung up while its
    /// alert waited on the pool dropped the handler, and the rows saying why it did not trade were never stored.
    /// They are queued where the alert is decided.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rejected_alerts_rows_are_stored_without_its_handler() {
        let (dir, store, app) = crate::app::tests::temp_app("hungup");
        let app = Arc::new(app);
        let demo = include_bytes!("../../strategies/demo.json");
        let id = app.apply_snapshot(demo).unwrap();
        let token = app.engine.strategy(&id).unwrap().token_hash.as_str().to_owned();
        let body = br#"{"ticker":"NOT-ALLOWED","action":"buy","message_id":"hung-up"}"#;
        let rt = tokio::runtime::Handle::current();
        let decided = {
            let (app, token) = (Arc::clone(&app), token.clone());
            tokio::task::spawn_blocking(move || {
                decide(&app, &rt, &token, body, Some("application/json"), now_ms(), None)
            })
            .await
            .unwrap()
        };
        // The handler is gone: what was decided is dropped unanswered.
        let Decided::Recorded { status, .. } = decided else { panic!("not recorded where decided") };
        assert_eq!(status, 200);
        drop(decided);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            app.writer.barrier().await.unwrap();
            let rows = app.reader.logs(&id, &crate::store::LogQuery { limit: 100, ..Default::default() }).unwrap();
            if rows.iter().any(|r| r.message.contains("NOT-ALLOWED")) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the rejection's rows were not stored: {rows:?}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// An alert that waited for its strategy's turn on the decision pool (alerts queued ahead of it, a slow
    /// decision) had its orders' deadlines counted from its decision: a market order could go out that much later
    /// than the TTL after the alert arrived. They count from its receipt, as on a shared database.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deadline_counts_from_the_alerts_receipt_not_from_its_turn() {
        let (dir, store, app) = crate::app::tests::temp_app("receipt");
        let app = Arc::new(app);
        let id = app.apply_snapshot(include_bytes!("../../strategies/demo.json")).unwrap();
        let token = app.engine.strategy(&id).unwrap().token_hash.as_str().to_owned();
        let pool = Arc::new(crate::cpu::CpuPool::new(1).unwrap());
        // The decision ahead of this alert's holds the strategy's turn until released.
        let (started, running) = tokio::sync::oneshot::channel();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let ahead = {
            let (pool, id) = (Arc::clone(&pool), id.clone());
            tokio::spawn(async move {
                pool.run(&id, move || {
                    let _ = started.send(());
                    let _ = held.recv();
                })
                .await
            })
        };
        running.await.unwrap();
        let received = now_ms();
        let queued = {
            let (pool, id, app, rt) =
                (Arc::clone(&pool), id.clone(), Arc::clone(&app), tokio::runtime::Handle::current());
            let body = br#"{"ticker":"AAPL","action":"buy","message_id":"waited-its-turn"}"#;
            tokio::spawn(async move {
                pool.run(&id, move || decide(&app, &rt, &token, body, Some("application/json"), received, None)).await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        release.send(()).unwrap();
        ahead.await.unwrap().unwrap();
        let Decided::HandedOff { commit, .. } = queued.await.unwrap().unwrap() else { panic!("not processed") };
        commit.await.unwrap().unwrap();
        let rows = app.reader.strategy_outbox(&id, 10).unwrap();
        assert_eq!(rows.len(), 2, "a market order for each bot");
        for (r, _) in rows {
            let late = r.deadline_ms.map(|d| d - received - 60_000);
            assert_eq!(late, Some(0), "the deadline runs from the decision, {late:?} ms after the TTL ({})", r.bot);
            assert_eq!(r.created_ms, received, "the row is stamped at the decision ({})", r.bot);
        }
        pool.stop();
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }
}
