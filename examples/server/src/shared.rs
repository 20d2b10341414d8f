//! The webhook when several servers share one PostgreSQL: each alert is one transaction there. Under the
//! strategy's lock it counts the rate window (exact across servers), claims the dedup key (a unique-key
//! insert), reads the bots' states other servers wrote, has the engine decide with those answers
//! ([`Engine::deliver_settled`]), and stores the log and outbox rows, all in one commit. A race between
//! servers therefore trades once; a crash never separates the claim from the stored orders; and when
//! PostgreSQL cannot be reached the alert is answered 500 with the cause and nothing is kept, so the sender's
//! retry trades once.
//!
//! [`Engine::deliver_settled`]: strategy_webhook::Engine::deliver_settled

use crate::app::{now_ms, App};
use crate::error::ApiError;
use crate::http::{json, Answer};
use crate::store::pg::alert;
use crate::store::{LogEntry, StoreError};
use crate::webhook::Shield;
use bytes::Bytes;
use std::sync::Arc;
use strategy_webhook::engine::dedup_key;
use strategy_webhook::state::{Claim, Settled};
use strategy_webhook::Decision;

/// Decides and stores one alert on the shared database, and answers it.
pub async fn webhook(
    app: &Arc<App>,
    shield: &Arc<Shield>,
    token: &str,
    body: Bytes,
    content_type: Option<String>,
    id: String,
) -> (Answer, Option<String>) {
    // In a task of its own, so that a sender hanging up cannot cut it between the commit and waking the
    // dispatchers.
    let task = {
        let (app, shield, token, id) = (Arc::clone(app), Arc::clone(shield), token.to_owned(), id.clone());
        tokio::spawn(async move { settle(&app, &shield, &token, body, content_type, &id).await })
    };
    match task.await {
        Ok(Ok((status, response))) => (json(status, response), Some(id)),
        Ok(Err(Failed::Store(e))) => {
            tracing::error!(strategy = %id, error = %e, "an alert could not be decided on the shared database");
            (ApiError::SharedStore(e).answer(), Some(id))
        }
        Ok(Err(Failed::Busy)) | Err(_) => (ApiError::Busy.answer(), Some(id)),
    }
}

/// Why an alert was not answered by the engine.
enum Failed {
    /// The shared database failed: nothing of the alert is stored.
    Store(StoreError),
    /// The decision pool has stopped (shutting down).
    Busy,
}

impl From<StoreError> for Failed {
    fn from(e: StoreError) -> Failed {
        Failed::Store(e)
    }
}

async fn settle(
    app: &Arc<App>,
    shield: &Shield,
    token: &str,
    body: Bytes,
    content_type: Option<String>,
    id: &str,
) -> Result<(u16, String), Failed> {
    let Some(pg) = &app.shared else { return Err(Failed::Busy) };
    let now = now_ms();
    // The key before the transaction, off the runtime's threads: a hostile body costs its parse here, not
    // while the strategy is locked.
    let key = {
        let (body, ct) = (body.clone(), content_type.clone());
        shield
            .cpu
            .run(id, move || hex(&dedup_key(&body, &strategy_webhook::parse(&body, ct.as_deref()))))
            .await
            .map_err(|_| Failed::Busy)?
    };
    let limits = app.engine.store().limits();
    let mut client = pg.client().await?;
    let tx = alert::begin(&mut client, id).await?;
    let opened = tx.open(&key, now, limits).await?;
    // A full window is answered 429 before the claim, as the engine's order of checks has it: nothing of this
    // transaction is kept then (see below).
    let (room, claim) = (opened.room, opened.claim);
    app.adopt_bot_states(id, opened.states, None);

    let settled = Arc::new(Settled::new(room, claim));
    let mut outcome = {
        let (app, settled, token, ct) = (Arc::clone(app), Arc::clone(&settled), token.to_owned(), content_type);
        shield
            .cpu
            .run(id, move || {
                crate::metrics::decide(|| {
                    app.engine.deliver_settled(&settled, token.as_bytes(), &body, ct.as_deref(), now)
                })
            })
            .await
            .map_err(|_| Failed::Busy)?
    };
    if outcome.strategy.as_deref() != Some(id) {
        // The token stopped naming this strategy in between (a rotation): nothing was counted or claimed.
        return Ok((outcome.http_status, outcome.response));
    }
    crate::metrics::alert(&outcome);
    let processed = outcome.decision == Decision::Processed;
    let rows = if processed { app.outbox_rows(id, &mut outcome, now) } else { Vec::new() };
    let mut bots: Vec<String> = rows.iter().map(|r| r.bot.clone()).collect();
    bots.dedup();
    let (status, response) = (outcome.http_status, std::mem::take(&mut outcome.response));
    if status == 429 {
        shield.refusals.note(id, now);
    }
    if !room {
        // Nothing was counted; the claim made with the count is dropped with the transaction.
        return Ok((status, response));
    }
    if processed && !app.freshness.commit_delay.is_zero() {
        tokio::time::sleep(app.freshness.commit_delay).await;
    }
    let unclaim = (claim == Claim::Fresh && !settled.keeps_claim()).then_some(key.as_str());
    let log = LogEntry::from_outcome(outcome, now);
    crate::metrics::commit(tx.finish(now, settled.counted(), unclaim, &rows, log.as_ref(), processed)).await?;
    for bot in bots {
        app.dispatcher.wake(app, id, &bot);
    }
    Ok((status, response))
}

fn hex(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}
