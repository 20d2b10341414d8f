//! The reference HTTPS server: the I/O shell around the `strategy_webhook` core.
//!
//! ```text
//! cargo run --release -p strategy-webhook-server            # the bundled demo strategy, self-signed certificate
//! cargo run --release -p strategy-webhook-server -- --help  # every flag
//! ```
//!
//! It serves `POST /webhooks/{tokenHash}` over TLS, keeps strategies live from a directory of snapshot files,
//! stores every Outcome's log rows in SQLite, and offers an admin API and a Logs view on a loopback listener.
//! See `docs/server.md`.

mod admin;
mod app;
mod args;
mod bots;
mod budget;
mod client;
mod cpu;
mod datadir;
mod dispatch;
mod error;
mod http;
mod lease;
mod metrics;
mod notify;
mod paper;
mod read_back;
mod refusals;
mod reload;
mod session;
mod shared;
mod shutdown;
mod startup;
mod store;
mod sync;
mod tls;
mod webhook;
mod xdg;

use args::Args;
use clap::Parser;

/// Every thread of the server allocates (requests, Outcomes, database rows): mimalloc's per-thread heaps cost a
/// fraction of glibc's arenas there (see Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.workers {
        builder.worker_threads(n.max(1));
    }
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Serves until SIGINT or SIGTERM, then stops in order.
async fn run(args: Args) -> Result<(), startup::StartError> {
    let running = startup::start(&args).await?;
    shutdown::wait_for_signal().await;
    running.stop().await
}
