//! The command line.

use crate::store;
pub use crate::xdg::default_data_dir;
use crate::xdg::xdg_dir;
use clap::Parser;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The bundled strategies (the demo) beside this package's source, `examples/strategies/`: where the binary was
/// built, so only a fallback for `cargo run` in a checkout (see [`default_strategies`]).
pub fn bundled_strategies() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).join("strategies")
}

/// The strategies directory when none is given, and whether it is the bundled demo: the user's
/// `$XDG_CONFIG_HOME/strategy-webhook/strategies` (`~/.config/strategy-webhook/strategies`) when it exists;
/// else the bundled demo when the binary runs where it was built (`cargo run` in a checkout); else the user's
/// directory, which the server creates empty.
pub fn default_strategies() -> (PathBuf, bool) {
    let user = xdg_dir("XDG_CONFIG_HOME", ".config").map(|d| d.join("strategy-webhook").join("strategies"));
    if let Some(dir) = user.as_ref().filter(|d| d.is_dir()) {
        return (dir.clone(), false);
    }
    let bundled = bundled_strategies();
    if bundled.is_dir() {
        return (bundled, true);
    }
    (user.unwrap_or_else(|| PathBuf::from("strategies")), false)
}

/// The data directory: `--data-dir`, else [`default_data_dir`]. Without either (no HOME, no XDG_DATA_HOME: a
/// service account, a container, cron) the start is refused: a relative fallback was the working directory's, and
/// a restart from another directory ran on an empty database (rotated-away tokens answering again, a retried
/// alert trading again, the unsent orders left behind).
pub fn data_dir(args: &Args) -> Result<PathBuf, String> {
    args.data_dir.clone().or_else(default_data_dir).ok_or_else(|| {
        "no data directory: neither HOME nor XDG_DATA_HOME is set (to an absolute path), and a directory relative to where the server is \
         started would change with it (another database, its rotated tokens and unsent orders left behind); set \
         HOME or pass --data-dir /absolute/path"
            .to_owned()
    })
}

/// The reference HTTPS server of strategy-webhook: receives trading alerts (TradingView-style webhooks) over
/// HTTPS, turns them into broker orders for each strategy's bots, and delivers them (or trades them on a
/// built-in paper broker). An operator console (strategies, bots, outbox, logs, sample messages) and a JSON
/// admin API listen on a second, loopback address.
#[derive(Parser, Debug)]
#[command(
    version,
    about = "The strategy-webhook server: trading alerts over HTTPS in, broker orders out, with an operator console.",
    after_help = "Defaults follow the XDG base directories: data in $XDG_DATA_HOME/strategy-webhook \
                  (~/.local/share/strategy-webhook), strategies in $XDG_CONFIG_HOME/strategy-webhook/strategies \
                  (~/.config/strategy-webhook/strategies) or, in a source checkout, the bundled demo. \
                  Both are printed at start. Docs: docs/server.md."
)]
pub struct Args {
    /// Address of the HTTPS webhook listener. Use 0.0.0.0:8443 to accept alerts from other machines.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: SocketAddr,
    /// Address of the admin API and Logs view (plain HTTP: keep it on loopback).
    #[arg(long, default_value = "127.0.0.1:8444")]
    pub admin_listen: SocketAddr,
    /// Directory of strategy snapshot files (one per *.json), reloaded live. Default:
    /// ~/.config/strategy-webhook/strategies if it exists, else the bundled demo in a source checkout.
    #[arg(long)]
    pub strategies: Option<PathBuf>,
    /// Directory for the self-signed certificate, the SQLite database and the admin token. Default:
    /// $XDG_DATA_HOME/strategy-webhook or ~/.local/share/strategy-webhook; required when neither HOME nor
    /// XDG_DATA_HOME is set.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// PEM certificate chain to serve instead of the self-signed one (with --key).
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,
    /// PEM private key of --cert.
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
    /// Alerts allowed per minute per webhook (the spec's 60; raise it for load tests).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..))]
    pub rate_limit: u32,
    /// The dedup window in milliseconds (the spec's five minutes). Tests shorten it to see a repeat after the
    /// window without waiting five minutes; an operator has no reason to change it.
    #[arg(long, default_value_t = 300_000, hide = true, value_parser = clap::value_parser!(i64).range(1..))]
    pub dedup_window_ms: i64,
    /// Log rows older than this many days are deleted.
    #[arg(long, default_value_t = 30)]
    pub log_retention_days: u32,
    /// At most this many log rows are kept per strategy (the oldest go first).
    #[arg(long, default_value_t = 100_000)]
    pub log_max_rows: u64,
    /// Base URL that senders use, for printed and rotated webhook URLs (default: https://localhost:PORT). Must be
    /// https:// with a host: the webhook listener speaks only HTTPS.
    #[arg(long)]
    pub public_url: Option<String>,
    /// Write the bound addresses here as JSON ({"webhook": …, "admin": …}) once listening (for tests and
    /// scripts that bind port 0).
    #[arg(long)]
    pub port_file: Option<PathBuf>,
    /// How often the strategies directory is checked for changes, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub reload_interval_ms: u64,
    /// On SIGINT/SIGTERM, how long requests in flight may take to finish, in seconds.
    #[arg(long, default_value_t = 30)]
    pub shutdown_timeout: u64,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// How a commit reaches the disk before an alert is answered: `full` (fsync at every group commit;
    /// survives power loss) or `normal` (survives a crash of the process, not a power loss).
    #[arg(long, value_enum, default_value = "full")]
    pub synchronous: store::Sync,
    /// JSON file mapping bot id to its delivery: {"delivery": "paper"} or {"delivery": "http", "base_url": …,
    /// "auth": {…}}. Bots not listed trade on the built-in paper broker.
    #[arg(long)]
    pub bots: Option<PathBuf>,
    /// Seconds after which an http bot whose state could not be read from its broker gets a WARN in the Logs.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    pub stale_state_secs: u64,
    /// Longest an alert acting on an instrument's position (a CLOSE, a reversal, a MODIFY or CANCEL) waits, in its
    /// strategy's turn, for an http bot's account to be read back after an entry in that instrument the broker just
    /// took (so a CLOSE right after its OPEN finds the position); 0 never waits.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub read_back_wait_ms: u64,
    /// Print webhook URLs in the banner as `…/webhooks/<token>` instead of in full (for a standard output that
    /// ends up in a shared journal).
    #[arg(long)]
    pub hide_webhook_urls: bool,
    /// Accepted for older scripts: full webhook URLs are now printed unless --hide-webhook-urls.
    #[arg(long, hide = true)]
    pub print_webhook_urls: bool,
    /// JSON file mapping strategy id to its notification URL (Discord- or Slack-compatible chat webhook):
    /// {"id": {"url": {"env": VAR} | {"file": PATH} | {"value": URL}, "events": ["order", "failure", "rotation"]}}.
    #[arg(long)]
    pub notifications: Option<PathBuf>,
    /// Print the admin token itself in the banner (by default only the file that holds it).
    #[arg(long)]
    pub show_admin_token: bool,
    /// Start with an empty database although this data directory had one that is now missing or empty (its
    /// rotated tokens, dedup keys and unsent orders are lost); with `--database`, leave this data directory's
    /// own database (unsent orders, rotated tokens) behind, set aside under another name.
    #[arg(long)]
    pub fresh_database: bool,
    /// Most connections open at once on the webhook listener (lowered to what the open-file limit allows).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Most connections open at once from one address (an IPv6 /64 counts as one address).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_address: u32,
    /// Most webhook requests being read or decided at once; over it a request is answered 503.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: u32,
    /// Most webhook requests being read or decided at once from one address.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight_per_address: u32,
    /// Slowest body accepted, in bytes per second on average after the first 2 s (slower: 408).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub min_body_rate: u32,
    /// Threads that parse and decide alerts (default: one per core).
    #[arg(long)]
    pub cpu_threads: Option<usize>,
    /// At most this many outbox rows are kept per strategy; the oldest finished ones go first (rows still to
    /// send are never deleted).
    #[arg(long, default_value_t = 100_000)]
    pub outbox_max_rows: u64,
    /// A market order not sent within this many seconds of its alert's arrival (the broker down, say) is not
    /// sent at all: it is marked `expired`, with an ERROR row. Cancels are always sent.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub market_order_ttl_secs: u64,
    /// The same for limit orders (and changes to them).
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit_order_ttl_secs: u64,
    /// Share the store with other servers through PostgreSQL, e.g. `postgres://swh@db.internal/webhooks`
    /// (rotated tokens, dedup and rate windows, the outbox, bot states, logs). Default: the embedded SQLite
    /// database in --data-dir. See docs/deploy.md.
    #[arg(long, env = "SWH_DATABASE", hide_env_values = true)]
    pub database: Option<String>,
    /// Connections to PostgreSQL in this server's pool (with --database).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub database_pool: u32,
    /// With --database: seconds a bot's lease lasts unless its server renews it, i.e. how long the bots of a
    /// server that died wait before another server takes them over.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_ttl_secs: u64,
    /// Tests only: the same in milliseconds (wins over --lease-ttl-secs).
    #[arg(long, hide = true)]
    pub test_lease_ttl_ms: Option<u64>,
    /// Tests only: hold every outbox commit this long (a slow disk), to see a retry arrive meanwhile.
    #[arg(long, default_value_t = 0, hide = true)]
    pub test_commit_delay_ms: u64,
    /// Tests only: this server's clock reads this many ms off the machine's (servers with clocks apart).
    #[arg(long, default_value_t = 0, hide = true, allow_negative_numbers = true)]
    pub test_clock_offset_ms: i64,
    /// Tests only: how often the outbox is swept for rows still to send (a long one shows that an order goes
    /// out on its own wake-up, not on the sweep's).
    #[arg(long, hide = true)]
    pub test_sweep_ms: Option<u64>,
}
