//! Start-up, in the order that keeps the server correct: the data directory and its secrets, the certificate,
//! the database and what it remembers (rotated tokens, bot states), the listeners, the strategies, the dedup
//! and rate windows, the rows a previous run left unsent; only then does anything get served. The result is a
//! [`Running`] server, which `shutdown.rs` stops.

use crate::app::{self, App};
use crate::args::{default_strategies, Args};
use crate::budget::{self, Budget, Caps};
use crate::cpu::CpuPool;
use crate::datadir::{admin_token, create_private_dir, database_opened, prepare_database, write_atomically};
use crate::refusals::RateRefusals;
use crate::store::{Reader, Retention, RowCaps, Store, Windows};
use crate::webhook::Shield;
use crate::{admin, bots, dispatch, http, reload, tls};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use strategy_webhook::{Engine, Limits, TokenHash};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Why the server could not start (or stop cleanly): a message for the operator, with its cause where typed.
pub type StartError = Box<dyn std::error::Error + Send + Sync>;

/// How often old log rows are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(600);
/// How often expired dedup keys and rate marks are pruned.
const PRUNE_WINDOWS_EVERY: Duration = Duration::from_secs(60);
/// How often the rate-limit refusal rows are written (at most one write per strategy in that time).
const REFUSALS_EVERY: Duration = Duration::from_secs(1);

/// A server that answers: what [`Running::stop`] takes down, in order.
pub struct Running {
    pub(crate) app: Arc<App>,
    pub(crate) store: Store,
    /// Tells both accept loops to stop accepting.
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) public: JoinHandle<http::Connections>,
    pub(crate) admin: JoinHandle<http::Connections>,
    /// Cleared to end the reload thread.
    pub(crate) reloading: Arc<AtomicBool>,
    pub(crate) reload_thread: std::thread::JoinHandle<()>,
    pub(crate) pruner: JoinHandle<()>,
    /// The public listener's guards (the decision pool is stopped, the refusal rows written, at shutdown).
    pub(crate) shield: Arc<Shield>,
    /// Writes the rate-limit refusal rows every second.
    pub(crate) refusals: JoinHandle<()>,
    /// The notifications' sender, when any strategy has a notification URL.
    pub(crate) notifier: Option<JoinHandle<()>>,
    /// How long requests and deliveries in flight may take to finish.
    pub(crate) shutdown_timeout: Duration,
}

/// Starts everything `args` asks for and returns once both listeners accept.
pub async fn start(args: &Args) -> Result<Running, StartError> {
    // The arguments that stop the start are checked before anything is created.
    app::CLOCK_OFFSET_MS.store(args.test_clock_offset_ms, std::sync::atomic::Ordering::Relaxed);
    let public_url = args.public_url.as_deref().map(public_url).transpose()?;
    let data_dir = crate::args::data_dir(args)?;
    let (strategies, bundled) = match &args.strategies {
        Some(dir) => (dir.clone(), false),
        None => default_strategies(),
    };
    if args.strategies.is_none() && !bundled && !strategies.is_dir() {
        std::fs::create_dir_all(&strategies).map_err(|e| format!("cannot create {}: {e}", strategies.display()))?;
    }
    // A mistyped --strategies (or a file given for the directory) started a server that served nothing, every
    // alert a 404, with a warning each second in its log: a bad --bots file stops the start, and so does this.
    if args.strategies.is_some() {
        std::fs::read_dir(&strategies)
            .map_err(|e| format!("--strategies {}: not a readable directory ({e})", strategies.display()))?;
    }
    // Earlier versions kept their data under the working directory's target/: say where it went.
    let old = Path::new("target/strategy-webhook-data");
    if args.data_dir.is_none() && old.join("webhook.db").is_file() {
        tracing::warn!(old = %old.display(), now = %data_dir.display(), "the data directory's default moved; pass --data-dir to keep using the old one (its rotated tokens and unsent orders)");
    }
    create_private_dir(&data_dir)?;
    crate::datadir::lock_data_dir(&data_dir)?;
    let (tls_config, cert) = tls::server_config(args.cert.as_deref(), args.key.as_deref(), &data_dir)?;
    let admin_token = admin_token(&data_dir)?;

    // Raised before the database is opened (its pool), the cap computed once the bots are known (their pools).
    let open_files = budget::raise_open_files();

    let caps = RowCaps { log_rows: args.log_max_rows, outbox_rows: args.outbox_max_rows };
    let store = match &args.database {
        Some(url) => {
            crate::datadir::leave_local_database(&data_dir, args.fresh_database)?;
            let store = Store::open_postgres(url, args.database_pool as usize, caps)
                .await
                .map_err(|e| format!("cannot use the shared database: {e}"))?;
            crate::datadir::on_shared_database(&data_dir)?;
            tracing::info!(database = %redact(url), "sharing the store through PostgreSQL");
            store
        }
        None => {
            let db = data_dir.join("webhook.db");
            crate::datadir::leave_shared_database(&data_dir, args.fresh_database)?;
            prepare_database(&data_dir, &db, args.fresh_database)?;
            let store = Store::open_with_caps(&db, args.synchronous, caps)?;
            database_opened(&data_dir, &db)?;
            store
        }
    };
    let reader = store.reader();
    let tokens = rotated_tokens(&reader)?;

    let public = TcpListener::bind(args.listen).await.map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let admin_listener = TcpListener::bind(args.admin_listen)
        .await
        .map_err(|e| format!("cannot listen on {} (admin): {e}", args.admin_listen))?;
    let public_addr = public.local_addr().map_err(|e| e.to_string())?;
    let admin_addr = admin_listener.local_addr().map_err(|e| e.to_string())?;
    if !admin_addr.ip().is_loopback() {
        tracing::warn!(%admin_addr, "the admin listener is plain HTTP and not on loopback: its token can be sniffed");
    }
    let public_url = public_url.unwrap_or_else(|| default_public_url(public_addr));

    if let Some(path) = &args.notifications {
        crate::notify::configure(crate::notify::Notifications::load(path)?);
    }
    let bots = match &args.bots {
        Some(path) => bots::Bots::load(path, &data_dir)?,
        None => bots::Bots::default(),
    };
    if bots.any_tls() {
        crate::client::check_trust()?;
    }
    let database = if args.database.is_some() { u64::from(args.database_pool) } else { 0 };
    // An OAuth bot's token renewal runs in a task of its own, outside the slot of the request that started it.
    let renewals = bots.http().filter(|b| b.session.token_endpoint().is_some()).count() as u64;
    let reserved = budget::reserved_files(
        crate::sync::reads_in_flight(&bots).saturating_add(renewals),
        crate::client::idle_connections(&bots),
        crate::notify::receivers(),
        database,
    );
    let max_connections = budget::connection_cap(args.max_connections, open_files, reserved);
    let limits = Limits { rate_limit: args.rate_limit, dedup_window_ms: args.dedup_window_ms, ..Limits::default() };
    let mut app =
        App::new(Engine::with_limits(limits), store.writer(), reader.clone(), tokens, public_url, admin_token);
    if let Some(pg) = store.shared() {
        let ttl = match args.test_lease_ttl_ms {
            Some(ms) => Duration::from_millis(ms.max(100)),
            None => Duration::from_secs(args.lease_ttl_secs),
        };
        let leases = crate::lease::Leases::shared(pg.clone(), ttl)?;
        app = app.with_shared(pg, leases);
    }
    let app = Arc::new(app.with_bots(bots).with_freshness(app::Freshness {
        market_ttl_ms: i64::try_from(args.market_order_ttl_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
        limit_ttl_ms: i64::try_from(args.limit_order_ttl_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
        commit_delay: std::time::Duration::from_millis(args.test_commit_delay_ms),
    }));
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
    if app.shared.is_none() {
        restore_windows(&app, &reader, limits)?;
    } else {
        // The windows live in the shared database; rotations made on other servers are polled from it.
        spawn_token_poller(&app);
        spawn_clock_reader(&app).await;
    }

    let retention = Retention {
        max_age_ms: i64::from(args.log_retention_days) * 86_400_000,
        max_rows_per_strategy: args.log_max_rows,
    };
    let windows = Windows { dedup_ms: limits.dedup_window_ms, rate_ms: limits.rate_window_ms };
    if let Err(e) = app.writer.prune(retention, windows, app::now_ms()).await {
        tracing::error!(error = %e, "pruning the logs failed");
    }

    // Rows the previous run committed but did not finish sending (created before this moment, or stored up to
    // this row id: after a clock step back, the time alone cannot tell).
    dispatch::started_with_rows_up_to(reader.last_outbox_id()?);
    for (strategy, bot) in reader.open_bots()? {
        app.dispatcher.wake(&app, &strategy, &bot);
    }
    // And every second after, rows still pending are looked for, so that no lost wake-up can strand one.
    let every = args.test_sweep_ms.map_or(dispatch::SWEEP, std::time::Duration::from_millis);
    tokio::spawn(dispatch::sweep(Arc::clone(&app), reader.clone(), every));
    // http bots read their positions and working orders from their brokers now and then periodically.
    crate::sync::Syncer::start(&app, Duration::from_secs(args.stale_state_secs));
    app.read_back.set_wait(Duration::from_millis(args.read_back_wait_ms));

    let caps = Caps {
        connections: max_connections,
        connections_per_address: args.max_connections_per_address,
        in_flight: args.max_in_flight,
        in_flight_per_address: args.max_in_flight_per_address,
        in_flight_per_strategy: args.rate_limit,
    };
    let threads = args.cpu_threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let shield = Arc::new(Shield {
        budget: Budget::new(caps),
        cpu: CpuPool::new(threads).map_err(|e| format!("cannot start the decision threads: {e}"))?,
        refusals: RateRefusals::new(limits.rate_limit, limits.rate_window_ms),
        min_body_rate: args.min_body_rate,
    });
    tracing::info!(
        max_connections = caps.connections,
        per_address = caps.connections_per_address,
        max_in_flight = caps.in_flight,
        in_flight_per_address = caps.in_flight_per_address,
        in_flight_per_strategy = caps.in_flight_per_strategy,
        min_body_rate = args.min_body_rate,
        decision_threads = threads.max(1),
        "connection budget"
    );

    crate::metrics::watch_connections(Arc::clone(&shield.budget));
    let (stop, stop_rx) = watch::channel(false);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls_config);
    let public_app = Arc::clone(&app);
    let public_shield = Arc::clone(&shield);
    let public_task = tokio::spawn(http::serve(
        public,
        Some(acceptor),
        move |req| http::public(Arc::clone(&public_app), Arc::clone(&public_shield), req),
        Arc::clone(&shield.budget),
        stop_rx.clone(),
    ));
    let admin_app = Arc::clone(&app);
    let admin = crate::budget::ADMIN_CONNECTIONS;
    let admin_budget = Budget::new(Caps {
        connections: admin,
        connections_per_address: admin,
        in_flight: admin,
        in_flight_per_address: admin,
        in_flight_per_strategy: admin,
    });
    let admin_task = tokio::spawn(http::serve(
        admin_listener,
        None,
        move |req| admin::admin(Arc::clone(&admin_app), req),
        admin_budget,
        stop_rx,
    ));
    let refusals = spawn_refusals(&app, &shield);
    let notifier = crate::notify::spawn_sender(&app);

    let reloading = Arc::new(AtomicBool::new(true));
    let reload_thread = spawn_reloader(loader, &app, &reloading, Duration::from_millis(args.reload_interval_ms))?;
    let pruner = spawn_pruner(&app, retention, windows);

    if let Some(path) = &args.port_file {
        let ports = serde_json::json!({ "webhook": public_addr.to_string(), "admin": admin_addr.to_string() });
        write_atomically(path, ports.to_string().as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let show_urls = !args.hide_webhook_urls;
    if bundled {
        tracing::info!(dir = %strategies.display(), "no --strategies and no user strategies directory: serving the bundled demo");
    }
    banner(&app, args, (&strategies, &data_dir), &cert, (public_addr, admin_addr), show_urls);

    Ok(Running {
        app,
        store,
        stop,
        public: public_task,
        admin: admin_task,
        reloading,
        reload_thread,
        pruner,
        shield,
        refusals,
        notifier,
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout),
    })
}

/// The tokens rotated through the admin API, by strategy id, and the tokens they rotated away.
type Rotated = (HashMap<String, TokenHash>, HashMap<TokenHash, String>);

/// The tokens rotated through the admin API ([`Rotated`]).
fn rotated_tokens(reader: &Reader) -> Result<Rotated, StartError> {
    // The retired tokens first: a rotation another server commits between the two reads then shows as the new
    // token (its old one unretired here until a restart), never as a strategy's own token retired with no token
    // to replace it, which would refuse the strategy's file.
    let retired = reader.retired_tokens()?;
    let mut overrides = HashMap::new();
    for (id, token) in reader.token_overrides()? {
        match TokenHash::parse(token.as_bytes()) {
            Some(t) => {
                overrides.insert(id, t);
            }
            None => tracing::error!(strategy = %id, "ignoring a stored token of the wrong shape"),
        }
    }
    // A retired token of another shape could not be a snapshot's token either.
    let retired = retired
        .into_iter()
        .filter_map(|(token, strategy)| TokenHash::parse(token.as_bytes()).map(|t| (t, strategy)))
        .collect();
    Ok((overrides, retired))
}

/// How often a server sharing PostgreSQL looks for tokens rotated by the others (the old token answers 404
/// everywhere within about this long).
const TOKEN_POLL: Duration = Duration::from_millis(250);

/// Applies tokens rotated through other servers' admin APIs.
fn spawn_token_poller(app: &Arc<App>) {
    let app = Arc::clone(app);
    tokio::spawn(async move {
        // The version of each strategy's row last applied: a row is applied when its version changes.
        let mut applied: HashMap<String, i64> = HashMap::new();
        let mut tick = tokio::time::interval(TOKEN_POLL);
        loop {
            tick.tick().await;
            let reader = app.reader.clone();
            // Every row, not only those with a version above the highest seen: versions are drawn from a
            // sequence when a rotation is written, not when it commits, so one that commits after a later one
            // would never be seen, and its new token would answer 404 here until a restart. The table holds one
            // row per rotated strategy. A row already applied is skipped, so that a read taken just before
            // this server's own rotation committed does not put the old token back.
            let sent = std::time::Instant::now();
            match tokio::task::spawn_blocking(move || reader.token_changes()).await {
                Ok(Ok(rows)) => app.adopt_token_rows(rows, sent, &mut applied),
                Ok(Err(e)) => tracing::warn!(error = %e, "reading rotated tokens failed"),
                Err(_) => return,
            }
        }
    });
}

/// Reads the shared database's clock now and every [`crate::store::pg::clock::CLOCK_READ_EVERY`]: a server whose
/// clock is off it stores and sends nothing until it is set right ([`crate::store::pg::Pg::read_clock`]).
async fn spawn_clock_reader(app: &Arc<App>) {
    let Some(pg) = app.shared.clone() else { return };
    if let Err(e) = pg.read_clock().await {
        tracing::warn!(error = %e, "reading the shared database's clock failed");
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(crate::store::pg::clock::CLOCK_READ_EVERY);
        tick.tick().await;
        loop {
            tick.tick().await;
            if let Err(e) = pg.read_clock().await {
                tracing::debug!(error = %e, "reading the shared database's clock failed");
            }
        }
    });
}

/// What a database URL names (user, hosts, ports, database), for the logs: never the URL itself, which may hold a
/// password as `user:password@`, as `?password=` or as a `password=` pair of the key=value form.
fn redact(url: &str) -> String {
    let Ok(c) = url.parse::<tokio_postgres::Config>() else {
        return "(a database URL that does not parse)".into();
    };
    let hosts: Vec<String> = c
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                tokio_postgres::config::Host::Tcp(h) => h.clone(),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
            };
            match c.get_ports().get(i).or(c.get_ports().first()) {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        })
        .collect();
    format!("postgres://{}@{}/{}", c.get_user().unwrap_or(""), hosts.join(","), c.get_dbname().unwrap_or(""))
}

/// Reloading reads files: a plain thread keeps that off the runtime's workers.
fn spawn_reloader(
    mut loader: reload::Loader,
    app: &Arc<App>,
    running: &Arc<AtomicBool>,
    every: Duration,
) -> Result<std::thread::JoinHandle<()>, String> {
    let app = Arc::clone(app);
    let running = Arc::clone(running);
    let every = every.max(Duration::from_millis(50));
    std::thread::Builder::new()
        .name("reload".into())
        .spawn(move || {
            // In slices: a stop waits at most one of them for this thread, not a whole (possibly long) interval.
            let slice = Duration::from_millis(50);
            while running.load(Ordering::Relaxed) {
                let mut slept = Duration::ZERO;
                while slept < every && running.load(Ordering::Relaxed) {
                    std::thread::sleep(slice.min(every - slept));
                    slept += slice;
                }
                if running.load(Ordering::Relaxed) {
                    loader.scan(&app);
                }
            }
        })
        .map_err(|e| format!("cannot start the reload thread: {e}"))
}

/// Prunes the windows every minute and the logs every ten.
fn spawn_pruner(app: &App, retention: Retention, windows: Windows) -> JoinHandle<()> {
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
}

/// Writes the rate-limit refusal rows every second.
fn spawn_refusals(app: &App, shield: &Arc<Shield>) -> JoinHandle<()> {
    let writer = app.writer.clone();
    let shield = Arc::clone(shield);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(REFUSALS_EVERY);
        loop {
            tick.tick().await;
            shield.refusals.flush(&writer, app::now_ms()).await;
        }
    })
}

/// Puts the stored dedup keys and rate marks back into the engine before anything is served, so that a body
/// redelivered after a restart within the window is still a duplicate and the rate window still counts.
fn restore_windows(app: &App, reader: &Reader, limits: Limits) -> Result<(), StartError> {
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

/// `--public-url` without its trailing slashes, once it is an https URL with a host. The webhook listener speaks
/// only HTTPS: an `http://` URL (or a bare host) was printed in the banner and returned by a rotation, and the
/// senders given it never reached the server.
fn public_url(url: &str) -> Result<String, String> {
    let url = url.trim_end_matches('/');
    let rest =
        url.get(..8).filter(|scheme| scheme.eq_ignore_ascii_case("https://")).map(|_| &url[8..]).ok_or_else(|| {
            format!(
                "--public-url {url:?} must start with https:// (the webhook listener speaks only HTTPS), e.g. \
                 --public-url https://hooks.example.com"
            )
        })?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host.rsplit_once(':') {
        Some((h, port)) if !port.contains(']') => h,
        _ => host,
    };
    if host.is_empty() || host == "[]" {
        return Err(format!(
            "--public-url {url:?} has no host: give the name senders reach this server by, e.g. --public-url \
             https://hooks.example.com"
        ));
    }
    // The webhook path is appended to it: after a query or a fragment, or with a space or a port that is no
    // number, the printed URLs reach no webhook, and a sender configured with one never delivers an alert.
    // The port as it follows the host (user info cut, as for the host): a number a sender can reach, 1 to 65535;
    // `h:8443:9` read its host as `h:8443`.
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let port_ok = match hostport.rsplit_once(':') {
        Some((h, port)) if !port.contains(']') => {
            let bracketed = h.starts_with('[') && h.ends_with(']');
            (bracketed || !h.contains(':')) && port.parse::<u16>().is_ok_and(|p| p > 0) && !port.starts_with('+')
        }
        _ => true,
    };
    if rest.contains(['?', '#']) || url.chars().any(|c| c.is_whitespace() || c.is_control()) || !port_ok {
        return Err(format!(
            "--public-url {url:?} is not a base the webhook path can follow: give the scheme, the host, a numeric \
             port if any, and a path prefix if any, with no query, fragment or spaces, e.g. --public-url \
             https://hooks.example.com:8443"
        ));
    }
    Ok(url.to_owned())
}

fn default_public_url(addr: SocketAddr) -> String {
    // The self-signed certificate names localhost, so that is the name clients can verify.
    if addr.ip().is_loopback() || addr.ip().is_unspecified() {
        format!("https://localhost:{}", addr.port())
    } else {
        format!("https://{addr}")
    }
}

/// What the operator needs at start: where everything is, and the commands to try it.
fn banner(
    app: &App,
    args: &Args,
    (strategies, data_dir): (&Path, &Path),
    cert: &tls::CertInfo,
    (public, admin): (SocketAddr, SocketAddr),
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
    line(&mut out, format!("  data         {}", data_dir.display()));
    line(&mut out, format!("  certificate  {} ({how})", cert.cert_path.display()));
    line(&mut out, format!("               SHA-256 {}", cert.fingerprint));
    let admin_token = if args.show_admin_token { app.admin_token.as_str() } else { "<admin token>" };
    for s in &list {
        let url =
            if show_urls { app.webhook_url(&s.token_hash) } else { format!("{}/webhooks/<token>", app.public_url) };
        line(&mut out, format!("  [{}] {}", s.id, s.status.as_str()));
        line(&mut out, format!("    webhook    {url}"));
        line(&mut out, format!("    logs       http://{admin}/logs/{}?token={admin_token}", percent_encode(&s.id)));
    }
    // The strategy the ready-made commands use: the bundled demo when it is loaded, and only one whose bots all trade
    // on paper. Offered for a strategy whose bots trade at a broker, the "try it" buy placed a real order (10 AAPL,
    // $5,000 of AAPL) with nothing on the line saying so.
    let on_paper = |s: &&std::sync::Arc<strategy_webhook::Strategy>| {
        s.bots.iter().all(|b| matches!(app.bots.get(&b.id), crate::bots::Delivery::Paper))
    };
    let featured = list.iter().filter(on_paper).find(|s| &*s.id == "demo-equities").or(list.iter().find(on_paper));
    if show_urls && featured.is_none() && !list.is_empty() {
        line(&mut out, "  (no strategy trades on paper alone: no ready-made order to try is offered)".into());
    }
    if let Some(demo) = featured.filter(|_| show_urls) {
        let url = app.webhook_url(&demo.token_hash);
        let body = r#"'{"ticker":"AAPL","action":"buy"}'"#;
        line(&mut out, "  try it:".into());
        // -k skips verifying the self-signed certificate; --cacert verifies it without trusting anything else.
        let insecure = if cert.self_signed { "-k " } else { "" };
        line(&mut out, format!("    curl {insecure}-H 'Content-Type: application/json' -d {body} {url}"));
        // The generated certificate names the loopback host only: printed for another host, this verifying
        // curl failed (no name matches), though the banner said it verifies.
        let host = url.strip_prefix("https://").unwrap_or(&url).split('/').next().unwrap_or_default();
        let host = host.rsplit_once(':').filter(|(h, p)| !h.is_empty() && !p.contains(']')).map_or(host, |(h, _)| h);
        let loopback = matches!(host, "localhost" | "127.0.0.1" | "[::1]");
        if cert.self_signed && loopback {
            line(
                &mut out,
                format!(
                    "    curl --cacert '{}' -H 'Content-Type: application/json' -d {body} {url}",
                    // Quoted for the shell: a data directory with a space in it broke the command as copied.
                    cert.cert_path.display().to_string().replace('\'', r"'\''")
                ),
            );
        } else if cert.self_signed {
            line(
                &mut out,
                format!(
                    "    (the self-signed certificate names localhost only, not {host}: give --cert and --key for it \
                     to verify)"
                ),
            );
        }
    }
    line(&mut out, format!("  admin API    http://{admin}/api/strategies  (Authorization: Bearer <admin token>)"));
    // Standard output may end up in a journal: the admin token is shown as its file unless asked for.
    let token_file = data_dir.join("admin-token");
    if args.show_admin_token {
        line(&mut out, format!("  admin token  {}  (kept in {})", app.admin_token, token_file.display()));
    } else {
        line(&mut out, format!("  admin token  in {}  (--show-admin-token prints it here)", token_file.display()));
    }
    line(&mut out, format!("  console      http://{admin}/?token={admin_token}"));
    line(&mut out, "  stop with Ctrl-C: requests in flight finish first".into());
    print!("{out}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
}

/// A strategy id as a URL path segment.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{public_url, redact};

    #[test]
    fn a_public_url_must_be_https_with_a_host() {
        assert_eq!(public_url("https://hooks.example.com/").unwrap(), "https://hooks.example.com");
        // Printed with the webhook path after it, these reached no webhook.
        for bad in ["https://h/#x", "https://h/?a=1", "https://h:abc", "https://h:", "https://h o", "https://h/\tx"] {
            assert!(public_url(bad).is_err(), "{bad:?} taken");
        }
        for bad in ["https://h:0", "https://h:65536", "https://h:99999", "https://h:8443:9", "https://h:+80"] {
            assert!(public_url(bad).is_err(), "{bad:?} taken");
        }
        for good in [
            "https://h:8443",
            "https://[::1]:8443",
            "https://[fe80::1%25eth0]:8443",
            "https://h/prefix",
            "https://user@h",
            "https://user:pass@hooks.example.com",
            "https://user:pass@hooks.example.com:8443",
            "HTTPS://h:65535",
        ] {
            assert!(public_url(good).is_ok(), "{good:?} refused");
        }
        assert_eq!(public_url("HTTPS://h:8443/base").unwrap(), "HTTPS://h:8443/base");
        assert!(public_url("https://[::1]:8443").is_ok());
        for bad in ["http://hooks.example.com", "hooks.example.com", "https://", "https:///x", "https://:8443", "é"] {
            let e = public_url(bad).unwrap_err();
            assert!(e.contains("--public-url") && e.contains("https://"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_database_url_is_logged_without_its_password() {
        assert_eq!(redact("postgres://swh:hunter2@db:5432/swh"), "postgres://swh@db:5432/swh");
        assert_eq!(redact("postgres://swh@db/swh"), "postgres://swh@db:5432/swh");
        // A password given as a parameter or in the key=value form was logged whole.
        for url in [
            "postgres://swh@db:5432/swh?password=hunter2",
            "postgresql://swh@db:5432/swh?sslmode=disable&password=hunter2",
            "host=db port=5432 user=swh password=hunter2 dbname=swh",
            "postgres://swh:hunter2@db:5432/swh",
        ] {
            let shown = redact(url);
            assert!(!shown.contains("hunter2"), "{url} -> {shown}");
            assert_eq!(shown, "postgres://swh@db:5432/swh", "{url}");
        }
        assert!(!redact("postgres://swh:hunter2@db:notaport/swh").contains("hunter2"));
    }
}
