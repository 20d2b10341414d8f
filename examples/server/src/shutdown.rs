//! Shutdown, in the order that loses nothing: stop accepting, let requests in flight finish (bounded), stop the
//! reload thread and the pruner, let deliveries in flight finish and be recorded, let access token renewals in
//! flight keep their rotated refresh tokens, then commit and close the database.

use crate::startup::{Running, StartError};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Returns on SIGINT (Ctrl-C) or SIGTERM.
pub async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops the server");
            None
        }
    };
    let terminate = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}

impl Running {
    /// Stops the server (see the module's order) and returns once the database is flushed.
    pub async fn stop(self) -> Result<(), StartError> {
        tracing::info!("shutting down: no new connections; requests in flight finish");
        let _ = self.stop.send(true);
        let public_open = self.public.await.map_err(|e| e.to_string())?;
        let admin_open = self.admin.await.map_err(|e| e.to_string())?;
        let drained = tokio::time::timeout(self.shutdown_timeout, async {
            tokio::join!(public_open.drained(), admin_open.drained());
        })
        .await;
        if drained.is_err() {
            tracing::warn!("some connections did not finish within {} s and were cut", self.shutdown_timeout.as_secs());
        }
        self.reloading.store(false, Ordering::Relaxed);
        self.pruner.abort();
        self.refusals.abort();
        // Messages not sent yet stay queued for the next start.
        if let Some(n) = &self.notifier {
            n.abort();
        }
        // The last refusal counts, and no decision left running, before the database closes.
        self.shield.refusals.flush(&self.app.writer, crate::app::now_ms()).await;
        let shield = std::sync::Arc::clone(&self.shield);
        let _ = tokio::task::spawn_blocking(move || shield.cpu.stop()).await;
        // Deliveries in flight finish and are recorded before the database closes.
        let settled = self.app.dispatcher.stop(self.shutdown_timeout.min(Duration::from_secs(10))).await;
        // The runtime ending would cut a renewal whose token endpoint has already rotated the refresh token, before
        // the new one is written down: the restarted bot would be refused until a new login.
        if !crate::session::finish_renewals().await {
            tracing::warn!(
                "an access token renewal did not end in time; its bot may need a new login after the restart"
            );
        }
        // A delivery's result is queued for commit, not committed, when its permit comes back: given back before
        // it lands, the lease let another server take the bot over cleanly, read the row still open and send it
        // again (or fail a replace that went through). The writer's queue is waited for first; if it cannot be,
        // the leases run out instead, and the next holder looks the rows up.
        let recorded = tokio::time::timeout(Duration::from_secs(10), self.app.writer.barrier()).await;
        if settled && matches!(recorded, Ok(Ok(()))) {
            // With other servers: they take this one's bots over now rather than when its leases run out.
            self.app.leases.give_back_all().await;
        } else {
            // A request may yet reach its broker (on its way, or its answer lost and not settled). Given back, the
            // lease would let another server take the bot over as if this one had stopped cleanly, and send or
            // expire the row blind; left to run out, the taking over is one, and that server looks the rows up
            // first.
            self.app.leases.stop_taking();
        }
        self.store.close().await?;
        let reload_thread = self.reload_thread;
        let _ = tokio::task::spawn_blocking(move || reload_thread.join()).await;
        tracing::info!("stopped; the database is flushed");
        Ok(())
    }
}
