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
mod bots;
mod dispatch;
mod http;
mod paper;
mod reload;
mod store;
mod tls;

use app::App;
use clap::Parser;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use store::{Retention, Store, Windows};
use strategy_webhook::{Engine, Limits, TokenHash};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The bundled strategies (the demo) beside this package, `examples/strategies/`, wherever the server is started
/// from.
fn bundled_strategies() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).join("strategies")
}
/// How often old log rows are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(600);
/// How often expired dedup keys and rate marks are pruned.
const PRUNE_WINDOWS_EVERY: Duration = Duration::from_secs(60);

/// Reference HTTPS server for strategy-webhook: turns trading alerts into broker orders.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Address of the HTTPS webhook listener. Use 0.0.0.0:8443 to accept alerts from other machines.
    #[arg(long, default_value = "127.0.0.1:8443")]
    listen: SocketAddr,
    /// Address of the admin API and Logs view (plain HTTP: keep it on loopback).
    #[arg(long, default_value = "127.0.0.1:8444")]
    admin_listen: SocketAddr,
    /// Directory of strategy snapshot files (one per *.json), reloaded live. Default: the bundled demo.
    #[arg(long)]
    strategies: Option<PathBuf>,
    /// Directory for the self-signed certificate, the SQLite database and the admin token.
    #[arg(long, default_value = "target/strategy-webhook-data")]
    data_dir: PathBuf,
    /// PEM certificate chain to serve instead of the self-signed one (with --key).
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// PEM private key of --cert.
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// Alerts allowed per minute per webhook (the spec's 60; raise it for load tests).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..))]
    rate_limit: u32,
    /// Log rows older than this many days are deleted.
    #[arg(long, default_value_t = 30)]
    log_retention_days: u32,
    /// At most this many log rows are kept per strategy (the oldest go first).
    #[arg(long, default_value_t = 100_000)]
    log_max_rows: u64,
    /// Base URL that senders use, for printed and rotated webhook URLs (default: https://localhost:PORT).
    #[arg(long)]
    public_url: Option<String>,
    /// Write the bound addresses here as JSON ({"webhook": …, "admin": …}) once listening (for tests and
    /// scripts that bind port 0).
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// How often the strategies directory is checked for changes, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    reload_interval_ms: u64,
    /// On SIGINT/SIGTERM, how long requests in flight may take to finish, in seconds.
    #[arg(long, default_value_t = 30)]
    shutdown_timeout: u64,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// How a commit reaches the disk before an alert is answered: `full` (fsync at every group commit;
    /// survives power loss) or `normal` (survives a crash of the process, not a power loss).
    #[arg(long, value_enum, default_value = "full")]
    synchronous: store::Sync,
    /// JSON file mapping bot id to its delivery: {"delivery": "paper"} or {"delivery": "http", "base_url": …,
    /// "auth": {…}}. Bots not listed trade on the built-in paper broker.
    #[arg(long)]
    bots: Option<PathBuf>,
    /// Print every strategy's full webhook URL at start (done anyway for the bundled demo directory).
    #[arg(long)]
    print_webhook_urls: bool,
}

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

async fn run(args: Args) -> Result<(), String> {
    let bundled = args.strategies.is_none();
    let strategies = args.strategies.clone().unwrap_or_else(bundled_strategies);
    create_private_dir(&args.data_dir)?;
    let (tls_config, cert) = tls::server_config(args.cert.as_deref(), args.key.as_deref(), &args.data_dir)?;
    let admin_token = admin_token(&args.data_dir)?;

    let store = Store::open(&args.data_dir.join("webhook.db"), args.synchronous)?;
    let reader = store.reader();
    let mut overrides = HashMap::new();
    for (id, token) in reader.token_overrides()? {
        match TokenHash::parse(token.as_bytes()) {
            Some(t) => {
                overrides.insert(id, t);
            }
            None => tracing::error!(strategy = %id, "ignoring a stored token of the wrong shape"),
        }
    }

    let public = TcpListener::bind(args.listen).await.map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let admin_listener = TcpListener::bind(args.admin_listen)
        .await
        .map_err(|e| format!("cannot listen on {} (admin): {e}", args.admin_listen))?;
    let public_addr = public.local_addr().map_err(|e| e.to_string())?;
    let admin_addr = admin_listener.local_addr().map_err(|e| e.to_string())?;
    if !admin_addr.ip().is_loopback() {
        tracing::warn!(%admin_addr, "the admin listener is plain HTTP and not on loopback: its token can be sniffed");
    }
    let public_url = args
        .public_url
        .clone()
        .map(|u| u.trim_end_matches('/').to_owned())
        .unwrap_or_else(|| default_public_url(public_addr));

    let bots = match &args.bots {
        Some(path) => bots::Bots::load(path)?,
        None => bots::Bots::default(),
    };
    let limits = Limits { rate_limit: args.rate_limit, ..Limits::default() };
    let app = Arc::new(
        App::new(Engine::with_limits(limits), store.writer(), reader.clone(), overrides, public_url, admin_token)
            .with_bots(bots),
    );
    for (strategy, bot, state) in reader.bot_states()? {
        match serde_json::from_str(&state) {
            Ok(st) => app.set_bot_state(&strategy, &bot, st),
            Err(e) => tracing::error!(strategy = %strategy, bot = %bot, error = %e, "ignoring a stored bot state"),
        }
    }

    let mut loader = reload::Loader::new(strategies.clone());
    let loaded = loader.scan(&app);
    if loaded == 0 {
        tracing::warn!(dir = %strategies.display(), "no strategy loaded; add *.json snapshot files");
    }
    restore_windows(&app, &reader, limits)?;

    let retention = Retention {
        max_age_ms: i64::from(args.log_retention_days) * 86_400_000,
        max_rows_per_strategy: args.log_max_rows,
    };
    let windows = Windows { dedup_ms: limits.dedup_window_ms, rate_ms: limits.rate_window_ms };
    if let Err(e) = app.writer.prune(retention, windows, app::now_ms()).await {
        tracing::error!(error = %e, "pruning the logs failed");
    }

    // Rows the previous run committed but did not finish sending.
    for (strategy, bot) in reader.open_bots()? {
        app.dispatcher.wake(&app, &strategy, &bot);
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls_config);
    let public_app = Arc::clone(&app);
    let public_task = tokio::spawn(http::serve(
        public,
        Some(acceptor),
        move |req| http::public(Arc::clone(&public_app), req),
        stop_rx.clone(),
    ));
    let admin_app = Arc::clone(&app);
    let admin_task = tokio::spawn(http::serve(
        admin_listener,
        None,
        move |req| admin::admin(Arc::clone(&admin_app), req),
        stop_rx.clone(),
    ));

    // Reloading reads files: a plain thread keeps that off the runtime's workers.
    let reloading = Arc::new(AtomicBool::new(true));
    let reload_thread = {
        let app = Arc::clone(&app);
        let running = Arc::clone(&reloading);
        let every = Duration::from_millis(args.reload_interval_ms.max(50));
        std::thread::Builder::new()
            .name("reload".into())
            .spawn(move || {
                while running.load(Ordering::Relaxed) {
                    std::thread::sleep(every);
                    loader.scan(&app);
                }
            })
            .map_err(|e| format!("cannot start the reload thread: {e}"))?
    };
    let pruner = {
        let writer = app.writer.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PRUNE_WINDOWS_EVERY);
            tick.tick().await;
            let mut n: u32 = 0;
            loop {
                tick.tick().await;
                n = n.wrapping_add(1);
                let now = app::now_ms();
                let res = if n % (PRUNE_EVERY.as_secs() / PRUNE_WINDOWS_EVERY.as_secs()).max(1) as u32 == 0 {
                    writer.prune(retention, windows, now).await
                } else {
                    writer.prune_windows(retention, windows, now).await
                };
                if let Err(e) = res {
                    tracing::error!(error = %e, "pruning failed");
                }
            }
        })
    };

    if let Some(path) = &args.port_file {
        let ports = serde_json::json!({ "webhook": public_addr.to_string(), "admin": admin_addr.to_string() });
        write_atomically(path, ports.to_string().as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let show_urls = args.print_webhook_urls || bundled;
    banner(&app, &args, &strategies, &cert, public_addr, admin_addr, show_urls);

    wait_for_signal().await;
    tracing::info!("shutting down: no new connections; requests in flight finish");
    let _ = stop_tx.send(true);
    let public_open = public_task.await.map_err(|e| e.to_string())?;
    let admin_open = admin_task.await.map_err(|e| e.to_string())?;
    let drained = tokio::time::timeout(Duration::from_secs(args.shutdown_timeout), async {
        tokio::join!(public_open.drained(), admin_open.drained());
    })
    .await;
    if drained.is_err() {
        tracing::warn!("some connections did not finish within {} s and were cut", args.shutdown_timeout);
    }
    reloading.store(false, Ordering::Relaxed);
    pruner.abort();
    // Deliveries in flight finish and are recorded before the database closes.
    app.dispatcher.stop(Duration::from_secs(args.shutdown_timeout.min(10))).await;
    store.close().await?;
    let _ = tokio::task::spawn_blocking(move || reload_thread.join()).await;
    tracing::info!("stopped; the database is flushed");
    Ok(())
}

/// Puts the stored dedup keys and rate marks back into the engine before anything is served, so that a body
/// redelivered after a restart within the window is still a duplicate and the rate window still counts.
fn restore_windows(app: &App, reader: &store::Reader, limits: Limits) -> Result<(), String> {
    let now = app::now_ms();
    let mem = app.engine.store();
    let mut keys = 0;
    for (strategy, key, ts) in reader.dedup_keys(now - limits.dedup_window_ms)? {
        match strategy_webhook::engine::parse_hex_key(&key) {
            Some(k) => {
                mem.restore_key(&strategy, &k, ts);
                keys += 1;
            }
            None => tracing::error!(strategy = %strategy, "ignoring a stored dedup key that is not hex"),
        }
    }
    // Oldest first, as the window expects.
    let marks = reader.rate_marks(now - limits.rate_window_ms)?;
    for (strategy, ts) in &marks {
        mem.restore_rate(strategy, *ts);
    }
    tracing::info!(keys, rate_marks = marks.len(), "restored the dedup and rate windows");
    Ok(())
}

async fn wait_for_signal() {
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

fn default_public_url(addr: SocketAddr) -> String {
    // The self-signed certificate names localhost, so that is the name clients can verify.
    if addr.ip().is_loopback() || addr.ip().is_unspecified() {
        format!("https://localhost:{}", addr.port())
    } else {
        format!("https://{addr}")
    }
}

fn banner(
    app: &App,
    args: &Args,
    strategies: &Path,
    cert: &tls::CertInfo,
    public: SocketAddr,
    admin: SocketAddr,
    show_urls: bool,
) {
    let mut list = app.engine.strategies();
    list.sort_by(|a, b| a.id.cmp(&b.id));
    let mut out = String::new();
    let line = |out: &mut String, s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(&mut out, "strategy-webhook server is running".into());
    line(&mut out, format!("  webhooks     https://{public} (TLS only)"));
    line(
        &mut out,
        format!("  strategies   {} ({} loaded; edits are picked up live)", strategies.display(), list.len()),
    );
    let how = match (cert.self_signed, cert.generated) {
        (true, true) => "self-signed, generated now",
        (true, false) => "self-signed",
        _ => "given",
    };
    line(&mut out, format!("  certificate  {} ({how})", cert.cert_path.display()));
    line(&mut out, format!("               SHA-256 {}", cert.fingerprint));
    for s in &list {
        let url = if show_urls {
            app.webhook_url(&s.token_hash)
        } else {
            format!("{}/webhooks/<token_hash in its file, or rotate it>", app.public_url)
        };
        line(&mut out, format!("  webhook      {url}   [{}]", s.id));
    }
    // The strategy the ready-made commands use: the bundled demo when it is loaded.
    let featured = list.iter().find(|s| s.id == "demo-equities").or(list.first());
    if let Some(demo) = featured.filter(|_| show_urls) {
        let url = app.webhook_url(&demo.token_hash);
        let body = r#"'{"ticker":"AAPL","action":"buy"}'"#;
        line(&mut out, "  try it:".into());
        // -k skips verifying the self-signed certificate; --cacert verifies it without trusting anything else.
        let insecure = if cert.self_signed { "-k " } else { "" };
        line(&mut out, format!("    curl {insecure}-H 'Content-Type: application/json' -d {body} {url}"));
        if cert.self_signed {
            line(
                &mut out,
                format!(
                    "    curl --cacert {} -H 'Content-Type: application/json' -d {body} {url}",
                    cert.cert_path.display()
                ),
            );
        }
    }
    line(&mut out, format!("  admin API    http://{admin}/api/strategies  (Authorization: Bearer <admin token>)"));
    line(
        &mut out,
        format!("  admin token  {}  (kept in {})", app.admin_token, args.data_dir.join("admin-token").display()),
    );
    let page = featured.map(|s| format!("logs/{}", s.id)).unwrap_or_default();
    line(&mut out, format!("  logs view    http://{admin}/{page}?token={}", app.admin_token));
    line(&mut out, "  stop with Ctrl-C: requests in flight finish first".into());
    print!("{out}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
}

/// The admin API's bearer token: generated on first start, then read back from the data directory.
fn admin_token(data_dir: &Path) -> Result<String, String> {
    let path = data_dir.join("admin-token");
    match std::fs::read_to_string(&path) {
        Ok(s) if TokenHash::parse(s.trim().as_bytes()).is_some() => Ok(s.trim().to_owned()),
        Ok(_) => Err(format!("{} is not 64 lowercase hex characters; delete it to get a new token", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = app::random_hex()?;
            write_private(&path, format!("{token}\n").as_bytes())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(token)
        }
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Creates the data directory, readable by the owner only: it holds the private key, the admin token and the
/// rotated webhook tokens.
fn create_private_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    Ok(())
}

/// Writes a secret file readable by the owner only.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Writes a file so that a reader never sees it half written.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(tmp, path)
}
